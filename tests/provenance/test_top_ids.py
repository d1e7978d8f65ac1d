"""The highest ids of a graph, read above the floors a process remembers, equal the full scan's answer
whatever happened to the graph in between: grown, its newest nodes removed, emptied and regrown, a
reservation above it, or changed by another process."""
import pytest

from provenance.graph import queries, top_ids
from provenance.graph.graph import Graph, workspace_graph

pytestmark = pytest.mark.django_db


def _full(graph):
    return tuple(graph.ro_query(queries.MAX_IDS)[0])


def _add(graph, action, fact, effect):
    graph.query("CREATE (:Action {id: $a}) CREATE (:Fact {id: $f}) CREATE (:Effect {id: $e})",
                {"a": action, "f": fact, "e": effect})


def test_the_floored_read_equals_the_full_scan_through_every_change():
    graph = workspace_graph("top-ids")
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (None, None, None)
    _add(graph, 5, 50, 500)
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (5, 50, 500)
    _add(graph, 9, 90, 900)
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (9, 90, 900)
    # A failed recording removes what it had written: the newest ids are gone, the floor is above them.
    graph.query("MATCH (n) WHERE n.id IN [9, 90, 900] DELETE n")
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (5, 50, 500)
    # A reservation above the graph is answered, and never becomes a floor.
    graph.query("CREATE (:Reserved {action: 100, fact: 1000, effect: 10000})")
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (100, 1000, 10000)
    graph.query("MATCH (r:Reserved) DELETE r")
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (5, 50, 500)
    # Emptied and regrown by another process (this one never saw the delete): lower, then higher.
    Graph(graph.name, graph.url).query("MATCH (n) DELETE n")
    _add(graph, 2, 20, 200)
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (2, 20, 200)
    _add(graph, 7, 70, 700)
    assert tuple(top_ids.max_ids(graph)) == _full(graph) == (7, 70, 700)


def test_the_read_uses_the_floor(monkeypatch):
    """The red case of the speed-up: with a floor, ids below it are not what the index is asked for."""
    graph = workspace_graph("top-ids-floor")
    _add(graph, 3, 30, 300)
    top_ids.max_ids(graph)
    asked = []
    real = graph.ro_query
    monkeypatch.setattr(graph, "ro_query", lambda cypher, params=None: asked.append(params) or real(cypher, params))
    assert tuple(top_ids.max_ids(graph)) == (3, 30, 300)
    assert asked == [{"a": 3, "f": 30, "e": 300}]
