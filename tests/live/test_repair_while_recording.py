"""A repair and the desk's recordings share a workspace: neither deadlocks the other, no recording is
refused, and the repair ends repaired and verified."""
import threading
import time

import pytest
from django.db import connection

from provenance.graph import workspace_graph
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Ticket, Workspace
from provenance.services import desk_run, record_root
from repairs.job import run_repair
from repairs.models import Incident
from tests.conftest import wait_for
from tests.repairs.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)


def _in_thread(fn, out: list):
    def run():
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            out.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _recording_waits() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cur.fetchone()[0] > 0


def test_a_recording_waiting_for_the_graph_never_deadlocks_the_repair(tmp_path, monkeypatch):
    """The repair pauses after its walk; a recording arrives and waits; the repair then applies and
    counts the workspace's actions. Waiting for the graph while holding the workspace's row (the
    recorder's old lock order) deadlocked the two, and the repair ended failed."""
    desk_run(workspace="dl")
    incident = open_incident("dl", POISONED_PAGE)
    fault = tmp_path / "fault"
    fault.write_text("pause:walked")
    monkeypatch.setenv("KINTSUGI_FAULT_FILE", str(fault))
    repaired, recorded = [], []
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), repaired)
    wait_for(lambda: fault.read_text() == "paused:walked", timeout=60)
    ticket = Ticket.objects.filter(workspace__name="dl").order_by("ticket_id").first()
    recording = _in_thread(lambda: record_root(workspace="dl", agent="triage", payload=ticket.as_payload()), recorded)
    wait_for(_recording_waits, timeout=30)
    time.sleep(1.5)  # past Postgres's deadlock_timeout, had the recorder been holding the row
    fault.unlink()
    repairing.join(120)
    recording.join(120)
    incident.refresh_from_db()
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert isinstance(recorded[0], list) and recorded[0], recorded
    ws = Workspace.objects.get(name="dl")
    assert ws.action_count == workspace_graph("dl").ro_query("MATCH (a:Action) RETURN count(a)")[0][0]
