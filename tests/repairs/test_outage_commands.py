"""The commands for outages: flag_source says `blocked` when the broker refused the repair,
retry_incident sends it back (or refuses in one line, exit 2)."""
import json

import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.services import desk_run
from repairs.models import Incident
from tests.helpers import run_command

pytestmark = pytest.mark.django_db(transaction=True)


def _flag_with_the_broker_down(capsys, dead_broker, user) -> dict:
    desk_run(workspace="cli-out")
    with dead_broker():
        code, out = run_command(capsys, "flag_source", "--workspace", "cli-out", "--source", POISONED_PAGE,
                                "--reason", "poisoned", "--user", user.username, "--json")
    assert code == 0, out
    return json.loads(out[out.index("{"):])


def test_flag_source_json_says_blocked_with_the_error_when_the_broker_refuses_the_repair(capsys, dead_broker, lead):
    summary = _flag_with_the_broker_down(capsys, dead_broker, lead)
    assert summary["status"] == "blocked"
    assert summary["error"].startswith("could not enqueue the repair")
    assert Incident.objects.get(pk=summary["incident"]).status == Incident.Status.BLOCKED


def test_retry_incident_sends_a_blocked_repair_back_as_the_user_and_refuses_in_one_line(capsys, dead_broker, lead):
    summary = _flag_with_the_broker_down(capsys, dead_broker, lead)
    pk = str(summary["incident"])
    with dead_broker():  # still down: the retry is recorded and the incident is blocked again, honestly
        code, out = run_command(capsys, "retry_incident", pk, "--user", "lead", "--reason", "broker back?", "--json")
    assert code == 0 and json.loads(out)["status"] == "blocked"
    code, out = run_command(capsys, "retry_incident", pk, "--user", "lead", "--reason", "broker is back", "--json")
    assert code == 0 and json.loads(out)["status"] == "open" and json.loads(out)["error"] is None
    retry = Incident.objects.get(pk=pk).transitions.filter(to_status="open").last()
    assert (retry.actor.username, retry.via, retry.reason) == ("lead", "cli", "broker is back")
    code, out = run_command(capsys, "retry_incident", pk, "--user", "lead", "--reason", "again")
    assert code == 2 and out == f"error: incident #{pk} is open; only failed or blocked repairs are retried\n"
    code, out = run_command(capsys, "retry_incident", "999999", "--user", "lead", "--reason", "x")
    assert code == 2 and out == "error: unknown incident 999999\n"
