"""`execute_waiting`: what the sweep does for approved items, run now from the shell, exactly once."""
import json

import pytest
from django.core.management import call_command

from compensation.models import CompensationItem
from compensation.review.services import approve_item
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import LedgerEntry
from provenance.recording.services import desk_run, get_workspace
from repairs.models import Incident
from repairs.job import run_repair
from tests.helpers import run_command

pytestmark = pytest.mark.django_db(transaction=True)


def test_execute_waiting_executes_an_item_approved_while_the_broker_was_down_once(capsys, dead_broker, people):
    desk_run(workspace="cli-exec")
    ws = get_workspace("cli-exec")
    ws.members.add(people.lead, people.reviewer)
    call_command("flag_source", "--workspace", "cli-exec", "--source", POISONED_PAGE, "--reason", "poisoned",
                 "--user", people.lead.username)
    incident = run_repair(incident_id=Incident.objects.get(workspace=ws).pk)
    item = incident.compensation_items.get(kind="refund_reversal", ticket_id="t07")
    with dead_broker():
        approve_item(item=item, actor=people.reviewer, reason="ok", via="admin")
    capsys.readouterr()
    assert run_command(capsys, "execute_waiting", "--json") == (0, json.dumps({"executed": 1, "waiting": 0}, indent=2,
                                                                              sort_keys=True) + "\n")
    assert run_command(capsys, "execute_waiting") == (0, "executed 0 waiting items; 0 still waiting\n")
    item.refresh_from_db()
    assert item.status == "executed" and item.execution_attempts == 1
    assert LedgerEntry.objects.filter(idempotency_key=item.execution_key).count() == 1
