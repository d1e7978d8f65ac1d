"""'Why was this action repaired?' has one answer before and after the repair, over the API and MCP."""
from __future__ import annotations

import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source
from provenance.graph.paths import Edge, shortest_path
from provenance.recording.selectors import blast_radius, explain_path
from repairs.explain import explain_action

pytestmark = pytest.mark.django_db


@pytest.fixture
def canonical_workspace(settings):
    import uuid

    from provenance.recording.services import desk_run, get_workspace

    settings.CELERY_TASK_ALWAYS_EAGER = False
    name = f"explain-{uuid.uuid4().hex[:8]}"
    desk_run(workspace=name)
    return get_workspace(name)


@pytest.fixture
def repaired_canonical(canonical_workspace):
    from tests.helpers import repair

    return repair(canonical_workspace.name, POISONED_PAGE)


def _edges(pairs):
    def upstream(frontier):
        return [Edge(p, c, k) for p, c, k in pairs if c in frontier]
    return upstream


def test_shortest_path_over_a_diamond_takes_the_lowest_ids():
    # 1 ingested the source; 2 and 3 both read it; 4 read both: two equally short chains.
    edges = _edges([(1, 2, "FEEDS"), (1, 3, "FEEDS"), (3, 4, "FEEDS"), (2, 4, "FEEDS"), (4, 5, "HANDED_OFF")])
    steps = shortest_path(starts=[1], target=5, upstream=edges)
    assert [(s.action, s.edge, s.from_action) for s in steps] == [
        (1, "INGESTED", None), (2, "FEEDS", 1), (4, "FEEDS", 2), (5, "HANDED_OFF", 4)]
    assert shortest_path(starts=[1], target=1, upstream=edges)[0].edge == "INGESTED"
    assert shortest_path(starts=[9], target=5, upstream=edges) == []


def test_explain_of_a_rerun_action_gives_its_path_before_and_after_the_repair(repaired_canonical):
    incident = repaired_canonical
    ws = incident.workspace
    triage = incident.outcomes.get(agent="triage", ticket="t05")
    assert triage.status.startswith("rerun")
    # The live graph no longer ties the re-run to the page (that is what the repair did)...
    assert explain_path(workspace=ws.name, source=POISONED_PAGE, action_id=triage.action_id) == []
    # ...but the question "why was it repaired?" still has its answer.
    steps = explain_action(workspace=ws, source=POISONED_PAGE, action_id=triage.action_id)
    assert [(s["agent"], s["reached_by"]["edge"]) for s in steps] == [("research", "INGESTED"), ("triage", "FEEDS")]
    assert steps[0]["reached_by"]["source"] == POISONED_PAGE and "vip_rules" in steps[1]["reached_by"]["facts"]


def test_explain_before_a_repair_reads_the_live_graph(canonical_workspace):
    ws = canonical_workspace
    radius = blast_radius(workspace=ws, source=POISONED_PAGE)
    t05 = next(a for a in radius["actions"] if a["agent"] == "triage" and a["ticket"] == "t05")
    steps = explain_action(workspace=ws, source=POISONED_PAGE, action_id=t05["id"])
    assert [(s["agent"], s["reached_by"]["edge"]) for s in steps] == [("research", "INGESTED"), ("triage", "FEEDS")]
    assert steps == explain_path(workspace=ws.name, source=POISONED_PAGE, action_id=t05["id"])
    assert Source.objects.filter(workspace=ws).exists()
