"""The in-process topology mirror answers blast radius questions; these tests hold it to the graph's own
algo.BFS (radius_actions_in_graph) through appends, repairs, half-written flushes and failed writes."""
import gc
import threading

import pytest

from provenance.graph import mirror, queries
from provenance.desk.scenario import PAGES, POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.recording.selectors import _radius_actions_cold, blast_radius, radius_actions, radius_actions_in_graph
from provenance.models import Ticket
from provenance.recording.services import desk_run, get_workspace, record_root
from tests.helpers import repair

pytestmark = pytest.mark.django_db(transaction=True)


def _cached(graph) -> mirror.Topology:
    with mirror.reading(graph) as topo:
        return topo


def _agrees(graph) -> None:
    for source, _, _ in PAGES:
        oracle = radius_actions_in_graph(graph, source)
        assert radius_actions(graph, source) == oracle, source
        assert _radius_actions_cold(graph, source) == oracle, source  # a process without a mirror yet


def test_mirror_matches_the_graph_on_the_canonical_desk():
    desk_run(workspace="mir")
    g = workspace_graph("mir")
    _agrees(g)
    assert len(radius_actions(g, POISONED_PAGE)) == 25


def test_appended_actions_are_merged_without_a_rebuild():
    desk_run(workspace="mir", tickets=40, seed=3)
    g = workspace_graph("mir")
    before = _cached(g)
    size = len(radius_actions(g, POISONED_PAGE))
    vip_claim = Ticket.objects.filter(workspace__name="mir", body__icontains="vip").first().as_payload()
    ids = record_root(workspace="mir", agent="triage", payload={**vip_claim, "ticket": "T-new"})
    after = _cached(g)
    assert after is before and after.hwm == max(ids)  # merged in place, not rebuilt
    assert len(radius_actions(g, POISONED_PAGE)) == size + len(ids)
    _agrees(g)


def test_a_repair_rebuilds_the_mirror_and_drops_dead_actions():
    desk_run(workspace="mir")
    g = workspace_graph("mir")
    before = _cached(g)
    assert len(radius_actions(g, POISONED_PAGE)) == 25
    incident = repair("mir", POISONED_PAGE)
    assert incident.status == "repaired"
    after = _cached(g)
    assert after is not before and after.epoch != before.epoch
    _agrees(g)
    assert blast_radius(workspace=get_workspace("mir"), source=POISONED_PAGE)["size"] == 0


def test_a_mirror_read_in_the_middle_of_a_flush_fetches_that_flush_again(settings):
    """Red case for the pending guard: a reader that lands between a flush's first and last query sees
    new actions without their edges; the next merge must fetch them again, edges and all."""
    desk_run(workspace="mir", tickets=20, seed=1)
    g = workspace_graph("mir")
    (top,) = g.ro_query("MATCH (a:Action) RETURN max(a.id)")[0]
    (research,) = g.ro_query("MATCH (a:Action)-[:INGESTED]->(:Source {id: $s}) RETURN a.id", {"s": POISONED_PAGE})[0]
    row = {"id": top + 1, "agent": "triage", "seq": float(top + 1), "ticket": "T-torn", "payload": "{}",
           "decision": "{}", "dhash": "x", "status": "ok", "root": True, "parent": None, "read_keys": [],
           "recorded_at": "2026-01-01T00:00:00+00:00", "incident": None}
    g.mark_appending()
    g.query(queries.CREATE_ACTIONS, {"rows": [row]}, append=True)
    mirror.forget()  # a process that reads the graph for the first time, right now
    torn = _cached(g)
    assert torn.max_id == top + 1 and torn.cursor == top
    assert top + 1 not in [a for a, _ in radius_actions(g, POISONED_PAGE)]  # as the graph stands
    g.query(queries.CREATE_FEEDS, {"rows": [{"writer": research, "reader": top + 1}]}, append=True)
    g.mark_appended(top + 1)
    assert _cached(g) is torn  # merged, not rebuilt
    assert (top + 1) in [a for a, _ in radius_actions(g, POISONED_PAGE)]
    _agrees(g)


def test_any_other_write_even_a_failing_one_changes_the_epoch():
    desk_run(workspace="mir", tickets=10, seed=2)
    g = workspace_graph("mir")
    epoch = g.stamp()[0]
    g.query("MATCH (a:Action {id: 1}) SET a.note = 'x'")
    assert g.stamp()[0] != epoch
    epoch = g.stamp()[0]
    with pytest.raises(Exception):
        g.query("MATCH (a:Action {id: 1}) SET a.note = ")  # a syntax error after a partial intent
    assert g.stamp()[0] != epoch
    g.delete()
    assert _cached(g).max_id == 0


def test_a_new_process_and_a_deleted_graph_start_from_the_graph():
    desk_run(workspace="mir", tickets=10, seed=2)
    g = workspace_graph("mir")
    first = _cached(g)
    mirror.forget()
    assert _cached(g) is not first
    _agrees(g)
    desk_run(workspace="mir", tickets=12, seed=5)  # replaces the run: the graph is deleted and re-recorded
    _agrees(g)


def test_a_cold_process_answers_from_falkordb_while_the_mirror_is_read_behind_it(settings):
    """The first question of a process does not wait for the whole topology: it is answered by one
    algo.BFS (the same answer, the preview's agents, tickets and money included), and the copy read in the
    background answers the next one."""
    from provenance.recording.selectors import _radius, _radius_in_graph

    desk_run(workspace="mir-cold", tickets=60, seed=5)
    g = workspace_graph("mir-cold")
    settings.KINTSUGI_MIRROR_BACKGROUND = False
    def answers():  # effects in any order: the preview only counts and sums them
        return {s: (_radius(g, s)[:2], sorted(_radius(g, s)[2]), radius_actions(g, s)) for s, _, _ in PAGES}

    warm = answers()  # read from the mirror
    mirror.forget()
    settings.KINTSUGI_MIRROR_BACKGROUND = True
    key = (g.url, g.name)
    with mirror.reading_if_ready(g) as topo:
        assert topo is None  # nothing read yet: the caller asks FalkorDB
    cold = answers()
    assert cold == warm
    for source, _, _ in PAGES:  # FalkorDB's own answer, whatever the background thread has done meanwhile
        actions, effects = _radius_in_graph(g, source)
        assert (actions, sorted(effects)) == (warm[source][0][0], warm[source][1])
    for thread in [t for t in __import__("threading").enumerate() if t.name == f"mirror:{g.name}"]:
        thread.join(timeout=30)
    with mirror._lock:
        assert key in mirror._cache  # the background read finished: the next question is warm
    with mirror.reading_if_ready(g) as topo:
        assert topo is not None and topo.reach(POISONED_PAGE)
    assert blast_radius(workspace=get_workspace("mir-cold"), source=POISONED_PAGE)["size"] == len(warm[POISONED_PAGE][2])


def test_the_collector_pause_nests_across_threads_and_keeps_a_disabled_collector_off():
    assert gc.isenabled()
    inner_started, release = threading.Event(), threading.Event()

    def other_thread():
        with mirror.gc_paused():
            inner_started.set()
            release.wait(10)

    worker = threading.Thread(target=other_thread)
    with mirror.gc_paused():
        assert not gc.isenabled()
        worker.start()
        inner_started.wait(10)
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    worker.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with mirror.gc_paused():
            pass
        assert not gc.isenabled()  # the process had turned it off: it stays off
    finally:
        gc.enable()
