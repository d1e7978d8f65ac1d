"""The broker down while a source is flagged and an item approved: once it answers again, a worker
running the beat schedule repairs the incident and executes the item exactly once, with nobody's action."""
import time

import pytest
from django.core.management import call_command
from django.db import connection

from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import LedgerEntry
from provenance.recording.services import desk_run, get_workspace
from repairs.models import Incident
from repairs.outages import heal_outages
from repairs.services import flag_source
from tests.helpers import Worker, purge_broker, wait_for, worker_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

FAST_HEALING = {"KINTSUGI_RETRY_BACKOFF_SECONDS": "1", "KINTSUGI_RETRY_BACKOFF_MAX_SECONDS": "1",
                "KINTSUGI_RETRY_MAX": "2", "KINTSUGI_SWEEP_SECONDS": "1", "KINTSUGI_REPAIR_HELPERS": "0"}


def test_after_a_broker_outage_the_blocked_repair_runs_and_the_approved_item_executes_exactly_once(
        people, dead_broker, settings, tmp_path, capsys):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.KINTSUGI_SWEEP_SECONDS = 1  # this process's own sweep below waits as long as the worker's
    desk_run(workspace="broker-out")
    get_workspace("broker-out").members.add(people.lead, people.reviewer)
    with dead_broker():
        incident = flag_source(workspace=get_workspace("broker-out"), source_id=POISONED_PAGE, actor=people.lead,
                               reason="poisoned", via="admin")
    assert incident.status == Incident.Status.BLOCKED and "could not enqueue" in incident.error
    purge_broker()
    worker = Worker(worker_env(connection.settings_dict["NAME"], **FAST_HEALING), tmp_path / "worker.log",
                    beat=True).start()
    try:
        back = time.monotonic()
        wait_for(lambda: Incident.objects.get(pk=incident.pk).status == Incident.Status.REPAIRED, timeout=60)
        repaired_after = time.monotonic() - back
        item = CompensationItem.objects.get(incident=incident, kind="refund_reversal", ticket_id="t07")
        with dead_broker():
            approve_item(item=item, actor=people.reviewer, reason="ok", via="admin")
        assert CompensationItem.objects.get(pk=item.pk).status == "approved"  # its task never reached a worker
        back = time.monotonic()
        wait_for(lambda: CompensationItem.objects.get(pk=item.pk).status == "executed", timeout=30)
        executed_after = time.monotonic() - back
        time.sleep(2)  # two more sweeps: nothing is executed again
    finally:
        worker.stop()
    assert heal_outages().executed == 0
    call_command("execute_waiting", "--json")
    assert '"executed": 0' in capsys.readouterr().out
    item.refresh_from_db()
    assert item.execution_attempts == 1
    assert LedgerEntry.objects.filter(idempotency_key=item.execution_key).count() == 1
    assert AuditEvent.objects.filter(action="item.executed", subject_id=item.pk).count() == 1
    print(f"repaired {repaired_after:.1f}s and executed {executed_after:.1f}s after the broker answered")
