"""A recording never waits behind a repair's verification or drafting: only the apply step holds the
workspace's graph. Each test holds the repair in a phase on purpose (a fault point that pauses until
released) and records meanwhile; the recording must commit while the repair is still held."""
import time

import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Ticket
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run, record_root
from repairs.job import run_repair
from repairs.models import Incident
from tests.helpers import open_incident, wait_for
from tests.live.test_repair_while_recording import _clean_twin, _in_thread, _vip_tickets

pytestmark = pytest.mark.django_db(transaction=True)


def _record_while_held(workspace: str, held_at: str, payloads: list[dict], tmp_path, monkeypatch) -> tuple:
    """Hold the repair at `held_at`, record `payloads` one after another (as the `record` command does),
    and return how long that took and what it answered, measured before the repair is let go."""
    incident = open_incident(workspace, POISONED_PAGE)
    fault = tmp_path / "fault"
    fault.write_text(f"pause:{held_at}")
    monkeypatch.setenv("KINTSUGI_FAULT_FILE", str(fault))
    repaired = []
    repairing = _in_thread(lambda: run_repair(incident_id=incident.pk), repaired)
    wait_for(lambda: fault.read_text() == f"paused:{held_at}", timeout=120)
    started, recorded = time.monotonic(), []
    recording = _in_thread(lambda: [record_root(workspace=workspace, agent="triage", payload=p) for p in payloads],
                           recorded)
    recording.join(30)  # a recording waiting for the held repair would still be waiting here
    seconds = time.monotonic() - started
    still_held = fault.read_text() == f"paused:{held_at}"
    fault.unlink()
    repairing.join(300)
    incident.refresh_from_db()
    return incident, recorded, seconds, still_held


@pytest.mark.parametrize("held_at,scope", [("verifying", "radius"), ("verifying", "full"), ("drafted:0", "radius")])
def test_a_recording_commits_while_the_repair_verifies_or_drafts(held_at, scope, tmp_path, monkeypatch, settings):
    """`full`: the whole-desk verification, a clean baseline recorded of every root (what takes long on a
    large desk), as well as the one in proportion to the damage."""
    settings.KINTSUGI_VERIFY_SCOPE = scope
    workspace = f"{held_at[0]}{scope[0]}h"
    desk_run(workspace=workspace)
    payloads = _vip_tickets(workspace, 2) + [
        Ticket.objects.filter(workspace__name=workspace).order_by("ticket_id").first().as_payload()]
    incident, recorded, seconds, still_held = _record_while_held(workspace, held_at, payloads, tmp_path, monkeypatch)
    assert still_held, "the repair went past the held phase before the recordings were measured"
    assert recorded and isinstance(recorded[0], list), f"still waiting after {seconds:.1f}s: {recorded}"
    assert len(recorded[0]) == len(payloads) and all(recorded[0]), recorded
    assert seconds < 20, seconds
    assert incident.status == Incident.Status.REPAIRED, incident.error
    # The one hold a repair puts on the desk's recordings is measured: the apply step, seconds on this desk.
    assert 0 < incident.plan["graph_held_seconds"] < 20
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    # Landed after the repair applied: the workspace is the clean run with the same recordings after it.
    assert export_state(workspace=workspace) == _clean_twin(f"{workspace}-clean", payloads)
