"""The walk fetches per blast radius, not per action: model answers in a few CACHE_GET_MANY round trips,
action details in one range scan per kind, and the plan is unchanged by it."""
import pytest

from provenance.graph import queries
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import Graph, id_set, workspace_graph
from provenance.llm import reset_client
from provenance.recording.services import desk_run
from repairs import lookahead
from repairs.engine import RepairWalk
from repairs.steps import apply_step
from tests.helpers import flag_and_repair

pytestmark = pytest.mark.django_db(transaction=True)


def _count_walk_queries(monkeypatch):
    """The graph reads made while the walk runs (not verification's or drafting's)."""
    seen: list[str] = []
    walking = []
    original_query, original_run = Graph.ro_query, RepairWalk.run

    def counted(self, cypher, params=None):
        if walking:
            seen.append(cypher)
        return original_query(self, cypher, params)

    def run(self):
        walking.append(True)
        try:
            return original_run(self)
        finally:
            walking.clear()

    monkeypatch.setattr(Graph, "ro_query", counted)
    monkeypatch.setattr(RepairWalk, "run", run)
    return seen


def _repair_with_warm_cache(name: str, monkeypatch):
    # The clean answers in the workspace's cache, as a verification baseline or an earlier replay leaves
    # them (each workspace has a cache of its own), then the poisoned run over them.
    desk_run(workspace=name, exclude_source=POISONED_PAGE)
    desk_run(workspace=name)
    reset_client()
    seen = _count_walk_queries(monkeypatch)
    incident = flag_and_repair(name)
    return incident, seen


def test_re_runs_take_their_model_answers_from_a_few_batched_fetches(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    incident, seen = _repair_with_warm_cache("batch", monkeypatch)
    assert incident.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                               "superseded": 8, "new": 4}
    # A prediction can go stale (an earlier re-run in the window changed what a later one reads); at
    # most that one asks alone.
    assert seen.count(queries.CACHE_GET) <= 2
    assert 1 <= seen.count(queries.CACHE_GET_MANY) <= lookahead.LEVELS + 1
    assert seen.count(queries.WALK_LOAD) == 1


def test_without_the_lookahead_every_re_run_asks_the_cache_alone(settings, monkeypatch):
    # The red case: no window probed, so each re-run's model call is its own round trip.
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(lookahead.ModelLookahead, "before_visit", lambda self, aid: None)
    incident, seen = _repair_with_warm_cache("nobatch", monkeypatch)
    assert incident.counts["rerun_changed"] == 7
    assert seen.count(queries.CACHE_GET) >= 8


def test_a_stale_prediction_costs_a_lookup_not_a_wrong_answer(settings, monkeypatch):
    # Every probe predicts a request nobody will make: the real executions fetch their own answers and
    # the repair is the same.
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr(lookahead, "_probe", lambda walk, agent, payload, **kw: ("triage", {"stale": True}, {}))
    incident, seen = _repair_with_warm_cache("stale", monkeypatch)
    assert incident.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                               "superseded": 8, "new": 4}
    assert {k: incident.verification[k] for k in ("facts", "decisions", "effects")} == {
        "facts": 0, "decisions": 0, "effects": 0}
    assert seen.count(queries.CACHE_GET) >= 8


def test_an_id_set_addresses_each_id_once_and_nothing_outside_it():
    params = id_set([7, 3, 9, 7])
    assert (params["lo"], params["hi"]) == (3, 9)
    assert params["slot"] == [2, 0, 0, 0, 4, 0, 3]  # the last occurrence of 7 is the 4th row


def test_apply_by_id_set_touches_exactly_the_listed_actions(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="slots")
    graph = workspace_graph("slots")
    apply_step(graph, ("status", [{"id": 2, "status": "skipped", "incident": 1},
                                  {"id": 4, "status": "superseded", "incident": 1}]))
    rows = graph.ro_query("MATCH (a:Action) WHERE a.id >= 1 AND a.id <= 5 RETURN a.id, a.status ORDER BY a.id")
    assert [tuple(r) for r in rows] == [(1, "ok"), (2, "skipped"), (3, "ok"), (4, "superseded"), (5, "ok")]
