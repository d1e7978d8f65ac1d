"""A repair and the desk's recordings share a workspace: neither deadlocks the other, no recording is
refused, and the repair ends repaired and verified."""
import threading
import time

import pytest
from django.db import connection

from provenance.graph.graph import workspace_graph
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Ticket, Workspace
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run, record_root
from repairs.job import run_repair
from repairs.models import Incident
from tests.helpers import wait_for
from tests.helpers import open_incident

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
        cur.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE NOT l.granted AND d.datname = current_database()")
        return cur.fetchone()[0] > 0


def test_a_recording_waiting_for_the_graph_never_deadlocks_the_repair(tmp_path, monkeypatch):
    """The repair pauses while it holds the graph to apply; a recording arrives and waits; the repair
    then applies the rest and counts the workspace's actions. Waiting for the graph while holding the
    workspace's row (the recorder's old lock order) deadlocked the two, and the repair ended failed."""
    desk_run(workspace="dl")
    incident = open_incident("dl", POISONED_PAGE)
    fault = tmp_path / "fault"
    fault.write_text("pause:applied:1")
    monkeypatch.setenv("KINTSUGI_FAULT_FILE", str(fault))
    repaired, recorded = [], []
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), repaired)
    wait_for(lambda: fault.read_text() == "paused:applied:1", timeout=60)
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


def _vip_tickets(workspace: str, n: int) -> list[dict]:
    """Tickets whose triage reads the VIP rules (what the poisoned page wrote): customers writing again."""
    tickets = Ticket.objects.filter(workspace__name=workspace).order_by("ticket_id")
    return [t.as_payload() for t in tickets if "vip" in t.body.lower()][:n]


def _clean_twin(name: str, payloads: list[dict]) -> dict:
    """The clean run: the same desk without the page, then the same later recordings in the same order."""
    desk_run(workspace=name, exclude_source=POISONED_PAGE)
    for payload in payloads:
        record_root(workspace=name, agent="triage", payload=payload)
    return export_state(workspace=name)


def test_recordings_committed_while_the_repair_walked_are_caught_up(tmp_path, monkeypatch):
    desk_run(workspace="cu")
    payloads = _vip_tickets("cu", 4)
    assert len(payloads) == 4
    incident = open_incident("cu", POISONED_PAGE)
    fault = tmp_path / "fault"
    fault.write_text("pause:walked")
    monkeypatch.setenv("KINTSUGI_FAULT_FILE", str(fault))
    repaired = []
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), repaired)
    wait_for(lambda: fault.read_text() == "paused:walked", timeout=60)
    started = time.monotonic()
    ids = [record_root(workspace="cu", agent="triage", payload=p) for p in payloads]
    assert time.monotonic() - started < 20  # the walk holds nothing: they commit at once
    fault.unlink()
    repairing.join(180)
    incident.refresh_from_db()
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    late = {i for r in ids for i in r}
    caught = set(incident.outcomes.filter(action_id__in=late).values_list("action_id", flat=True))
    assert incident.plan["caught_up"] == len(caught) > 0
    assert set(incident.outcomes.values_list("action_id", flat=True)) >= caught
    # Nothing lost, nothing twice: the workspace is the clean run with the same recordings after it.
    assert export_state(workspace="cu") == _clean_twin("cu-clean", payloads)
    outcomes = list(incident.outcomes.values_list("action_id", flat=True))
    assert len(outcomes) == len(set(outcomes))


def test_a_repair_with_recordings_arriving_throughout_ends_repaired_and_none_is_refused():
    desk_run(workspace="live")
    payloads = _vip_tickets("live", 6) + [t.as_payload() for t in Ticket.objects.filter(
        workspace__name="live").order_by("ticket_id")[:14]]
    incident = open_incident("live", POISONED_PAGE)
    repaired, recorded, done = [], [], threading.Event()

    def record_all():
        out = []
        for payload in payloads:
            out.append(record_root(workspace="live", agent="triage", payload=payload))
            time.sleep(0.05)
        done.set()
        return out

    recorder = _in_thread(record_all, recorded)
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), repaired)
    repairing.join(300)
    recorder.join(300)
    assert not isinstance(recorded[0], BaseException), recorded[0]
    assert len(recorded[0]) == len(payloads)
    incident.refresh_from_db()
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    # Whatever landed before, during or after the repair: the workspace equals its clean run.
    assert export_state(workspace="live") == _clean_twin("live-clean", payloads)


def _repaired_with_recordings_during_the_walk(workspace: str, payloads: list[dict], fault, monkeypatch) -> Incident:
    incident = open_incident(workspace, POISONED_PAGE)
    fault.write_text("pause:walked")
    monkeypatch.setenv("KINTSUGI_FAULT_FILE", str(fault))
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), [])
    wait_for(lambda: fault.read_text() == "paused:walked", timeout=60)
    for payload in payloads:
        record_root(workspace=workspace, agent="triage", payload=payload)
    fault.unlink()
    repairing.join(180)
    monkeypatch.delenv("KINTSUGI_FAULT_FILE")
    incident.refresh_from_db()
    return incident


@pytest.mark.worker
def test_a_worker_killed_during_catch_up_resumes_to_the_same_result(tmp_path, monkeypatch):
    from tests.helpers import Worker, purge_broker, worker_env
    from tests.helpers import graph_dump, verification_outcome, wait_until_finished

    desk_run(workspace="ref")
    payloads = _vip_tickets("ref", 3)
    reference = _repaired_with_recordings_during_the_walk("ref", payloads, tmp_path / "ref-fault", monkeypatch)
    assert reference.status == Incident.Status.REPAIRED and reference.plan["caught_up"] > 0

    desk_run(workspace="kill")
    fault = tmp_path / "fault"
    fault.write_text("pause:walked")
    purge_broker()
    worker = Worker(worker_env(connection.settings_dict["NAME"], KINTSUGI_FAULT_FILE=str(fault)),
                    tmp_path / "worker.log").start()
    try:
        incident = open_incident("kill", POISONED_PAGE)
        wait_for(lambda: fault.exists() and fault.read_text() == "paused:walked", timeout=120)
        for payload in payloads:
            record_root(workspace="kill", agent="triage", payload=payload)
        fault.write_text("caught_up")  # go on; killed once the catch-up is checkpointed, before it is applied
        wait_until_finished(incident, timeout=180)
    finally:
        worker.stop()
    incident.refresh_from_db()
    assert not fault.exists(), "the fault point was never reached"
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert incident.attempts >= 1 and incident.plan["caught_up"] == reference.plan["caught_up"]
    assert incident.counts == reference.counts
    assert verification_outcome(incident.verification) == verification_outcome(reference.verification)
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]

    def effects(inc):
        return sorted(inc.effects.values_list("role", "kind", "ticket", "amount_cents", "effect_id"))

    assert effects(incident) == effects(reference)
    assert graph_dump("kill") == graph_dump("ref")
