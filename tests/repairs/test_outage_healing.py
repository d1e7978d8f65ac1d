"""Outages heal without anyone: a real worker running the beat schedule, against a FalkorDB server of the
test's own that is stopped in the middle of a repair and started again after the retries are spent."""
import time
from pathlib import Path

import pytest
from django.db import connection

from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.services import desk_run
from repairs.models import Incident
from tests.helpers import Worker, open_incident, purge_broker, wait_for, worker_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Retries a second apart and spent after two; a sweep every second. The product defaults are minutes.
FAST_HEALING = {"KINTSUGI_RETRY_BACKOFF_SECONDS": "1", "KINTSUGI_RETRY_BACKOFF_MAX_SECONDS": "1",
                "KINTSUGI_RETRY_MAX": "2", "KINTSUGI_SWEEP_SECONDS": "1", "KINTSUGI_REPAIR_HELPERS": "0"}
HEALED_WITHIN = 30  # seconds from FalkorDB answering again to the incident repaired


def _fault(path: Path, wanted: str) -> None:
    path.write_text(wanted)


def test_falkordb_stopped_mid_repair_and_started_again_is_repaired_with_no_human_action(own_falkordb, tmp_path):
    stop, start, port = own_falkordb
    desk_run(workspace="outage")
    fault = tmp_path / "fault"
    _fault(fault, "pause:walked")  # the worker stops after walking, before applying a single step
    purge_broker()
    env = worker_env(connection.settings_dict["NAME"], FALKORDB_URL=_own_url(port), KINTSUGI_FAULT_FILE=str(fault),
                     **FAST_HEALING)
    worker = Worker(env, tmp_path / "worker.log", beat=True).start()
    try:
        incident = open_incident("outage", POISONED_PAGE)
        wait_for(lambda: fault.exists() and fault.read_text() == "paused:walked", timeout=60)
        stop()
        fault.unlink()  # the repair goes on applying its plan into a stopped FalkorDB
        wait_for(lambda: Incident.objects.get(pk=incident.pk).status == Incident.Status.BLOCKED, timeout=30)
        # Both retries spent (1 s apart, jittered): only the sweep can bring it back now.
        time.sleep(4)
        incident.refresh_from_db()
        assert incident.status == Incident.Status.BLOCKED and f"127.0.0.1:{port}" in incident.error
        start()
        back = time.monotonic()
        wait_for(lambda: Incident.objects.get(pk=incident.pk).status == Incident.Status.REPAIRED,
                 timeout=HEALED_WITHIN)
        healed_after = time.monotonic() - back
    finally:
        worker.stop()
    incident.refresh_from_db()
    assert incident.counts["superseded"] == 8 and incident.effects_invalidated == 10
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    transitions = list(incident.transitions.values_list("to_status", "actor"))
    assert transitions[0] == ("open", incident.flagged_by_id)
    assert all(actor is None for _, actor in transitions[1:])  # nobody retried it
    assert transitions[-1] == ("repaired", None)
    print(f"healed {healed_after:.1f}s after FalkorDB came back")


def _own_url(port: int) -> str:
    from core import embedded

    return embedded.server_url(port)


def test_an_overlapping_repair_waits_for_one_an_outage_left_half_applied_and_both_verify_clean(own_falkordb, tmp_path):
    stop, start, port = own_falkordb
    desk_run(workspace="outage2")
    fault = tmp_path / "fault"
    _fault(fault, "pause:applied:1")  # the first repair stops with one step of its plan in the graph
    purge_broker()
    env = worker_env(connection.settings_dict["NAME"], FALKORDB_URL=_own_url(port), KINTSUGI_FAULT_FILE=str(fault),
                     **FAST_HEALING)
    worker = Worker(env, tmp_path / "worker.log", beat=True).start()
    try:
        first = open_incident("outage2", POISONED_PAGE)
        wait_for(lambda: fault.exists() and fault.read_text() == "paused:applied:1", timeout=60)
        second = open_incident("outage2", "acme/refund-policy")
        stop()
        fault.unlink()
        waiting = wait_for(lambda: Incident.objects.filter(pk=second.pk, status=Incident.Status.BLOCKED).first(),
                           timeout=30)
        assert waiting.error.startswith(f"waiting for incident #{first.pk} (blocked)")
        assert waiting.waiting_for_id == first.pk
        assert waiting.plan is None and not waiting.transitions.filter(to_status="repairing").exists()
        start()
        wait_for(lambda: Incident.objects.filter(pk__in=[first.pk, second.pk], status=Incident.Status.REPAIRED)
                 .count() == 2, timeout=HEALED_WITHIN)
    finally:
        worker.stop()
    for incident in Incident.objects.filter(pk__in=[first.pk, second.pk]):
        assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0], incident.source_id
    assert Incident.objects.get(pk=second.pk).excluded == sorted([POISONED_PAGE, "acme/refund-policy"])
    assert Incident.objects.get(pk=first.pk).excluded == [POISONED_PAGE]
