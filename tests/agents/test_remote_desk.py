"""The example desk in a separate process, HTTP only: recorded, flagged, repaired through its replay
endpoint, verified, and counted against the same desk recorded in-process."""
import pytest

from provenance.graph import queries
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import GraphUnavailable, workspace_graph
from provenance.recording.replay import ReplayUnavailable
from provenance.recording.services import desk_run
from repairs.models import Incident
from repairs.job import run_repair
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)


def _outcome(incident: Incident) -> dict:
    v = incident.verification
    return {"status": incident.status, "radius": incident.blast_radius, "counts": incident.counts,
            "verification": (v["facts"], v["decisions"], v["effects"]),
            "invalidated": sorted(e.kind for e in incident.effects.filter(role="invalidated"))}


def test_remote_desk_repairs_through_its_replay_endpoint_like_the_same_desk_in_process(remote_desk):
    desk = remote_desk("remote")
    line = desk.start()
    assert line == {"workspace": "remote", "actions": 66, "source": POISONED_PAGE}
    assert workspace_graph("remote").ro_query(queries.ACTION_COUNT)[0][0] == 66
    performed = desk.performed()
    assert len(performed) == 15 + 24  # every refund and email of the recording, performed by the agent once

    desk_run(workspace="local")
    local = _outcome(run_repair(incident_id=open_incident("local", POISONED_PAGE).pk))
    repaired = run_repair(incident_id=open_incident("remote", POISONED_PAGE).pk)
    remote = _outcome(repaired)
    assert remote == local
    # Verification asked the remote agents to replay only the set it re-ran, not the 66 actions of the desk.
    v = repaired.verification
    assert v["scope"] == "radius" and 0 < v["replay_calls"] == v["actions_rerun"] < 66
    assert remote["status"] == "repaired" and remote["verification"] == (0, 0, 0)
    assert remote["counts"] == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                                "superseded": 8, "new": 4}
    # The re-runs and the baseline replayed here, and every effect they made was held, never performed.
    assert desk.performed() == performed


def test_replay_endpoint_down_blocks_the_repair_and_it_resumes_to_the_same_result(remote_desk):
    desk = remote_desk("remote-down")
    desk.start()
    performed = desk.performed()
    desk.stop()
    incident = open_incident("remote-down", POISONED_PAGE)
    with pytest.raises(ReplayUnavailable) as caught:
        run_repair(incident_id=incident.pk)
    assert isinstance(caught.value, GraphUnavailable)  # what the repair task retries and the sweep resumes
    incident.refresh_from_db()
    assert incident.status == "blocked"
    # The first replay is the research agent's digest of the flagged page, re-run with the page answering None.
    assert incident.error.startswith("agent 'desk_research' unreachable: replay of action")
    assert "(failure 1; the repair retries once the agent answers)" in incident.error and "refused" not in incident.error  # fixed words, not the socket's

    desk.start(serve_only=True)
    healed = _outcome(run_repair(incident_id=incident.pk))
    assert healed["status"] == "repaired" and healed["verification"] == (0, 0, 0)
    assert healed["counts"] == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                                "superseded": 8, "new": 4}
    assert desk.performed() == performed


def test_a_desk_recorded_by_concurrent_http_agents_through_the_recording_entrance_repairs_to_its_clean_run(
        remote_desk):
    """The tickets' roots recorded by six threads at once, each a recording open beside the others, through
    the recording entrance (kintsugi_site.recording_entrance) with its calls staged (provenance.recording.staging):
    the repair ends where the desk recorded one root at a time, in-process, ends, and verifies clean."""
    desk = remote_desk("remote-concurrent")
    assert desk.start(concurrency=6) == {"workspace": "remote-concurrent", "actions": 66, "source": POISONED_PAGE}
    graph = workspace_graph("remote-concurrent")
    assert graph.ro_query(queries.ACTION_COUNT)[0][0] == 66
    assert graph.ro_query("MATCH (a:Action) WHERE a.snap IS NOT NULL RETURN count(a)")[0][0] > 0  # side by side
    assert len(desk.performed()) == 15 + 24  # each refund and email performed once, none lost or doubled

    desk_run(workspace="local-concurrent")
    local = _outcome(run_repair(incident_id=open_incident("local-concurrent", POISONED_PAGE).pk))
    remote = _outcome(run_repair(incident_id=open_incident("remote-concurrent", POISONED_PAGE).pk))
    assert remote == local
    assert remote["status"] == "repaired" and remote["verification"] == (0, 0, 0)

