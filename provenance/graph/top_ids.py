"""The highest action, fact and effect ids of a graph (and a repair's reservation above them), read from
the id indexes above a floor.

`max(a.id)` over a label scans every node: ~23 ms at 200k actions, paid when each recording opens and
again when it commits. Ids only grow, so each process remembers the last maxima it saw per graph and
asks the index only for ids at or above them (~0.3 ms). The answer is exact whatever happened
meanwhile: if anything is at or above the floor, the maximum among those is the graph's maximum; if
nothing is (the graph was emptied, or its newest nodes removed by a recording that failed), the full
scan runs.
"""
from __future__ import annotations

import threading

from provenance.graph import rows
from provenance.graph.queries import Query

# Raw maxima above the floors, and the reservation (repairs.parts) kept apart so it never becomes a floor.
ABOVE = Query("""
OPTIONAL MATCH (a:Action) WHERE a.id >= $a WITH max(a.id) AS a
OPTIONAL MATCH (f:Fact) WHERE f.id >= $f WITH a, max(f.id) AS f
OPTIONAL MATCH (e:Effect) WHERE e.id >= $e WITH a, f, max(e.id) AS e
OPTIONAL MATCH (r:Reserved)
RETURN a, f, e, r.action, r.fact, r.effect
""")

_floors: dict[tuple[str, str], tuple[int, int, int]] = {}
_lock = threading.Lock()


def max_ids(graph) -> rows.MaxIds:
    """What queries.MAX_IDS answers (each id the higher of the graph's maximum and the reservation's),
    for `graph` (provenance.graph.graph.Graph)."""
    cypher, params = ask(graph)
    return answer(graph, params, graph.ro_query(cypher, params))


def ask(graph) -> tuple[Query, dict]:
    """The query max_ids() sends and its parameters (the floors this process saw), for a caller that
    sends it in a pipeline with others (provenance.graph.pipelined); its rows go to answer()."""
    with _lock:
        floors = _floors.get((graph.url, graph.name), (0, 0, 0))
    return ABOVE, dict(zip("afe", floors))


def answer(graph, params: dict, result: list) -> rows.MaxIds:
    """max_ids() from what ask()'s query answered (one more round trip, the full scan, when the floors
    were above everything the graph still holds)."""
    a, f, e, ra, rf, re_ = result[0]
    if any(found is None and params[k] > 0 for found, k in zip((a, f, e), "afe")):
        a, f, e, ra, rf, re_ = graph.ro_query(ABOVE, {"a": 0, "f": 0, "e": 0})[0]
    with _lock:
        _floors[(graph.url, graph.name)] = (a or 0, f or 0, e or 0)
    return rows.MaxIds(*(found if reserved is None or (found or 0) >= reserved else reserved
                         for found, reserved in ((a, ra), (f, rf), (e, re_))))


def forget(graph) -> None:
    """Drop the floors of a graph that was deleted (only a speed-up: a stale floor is also caught)."""
    with _lock:
        _floors.pop((graph.url, graph.name), None)
