"""The path from a source to an action that depended on it: one search, whichever edges it runs on.

Before a repair the live graph holds the edges (READ, FEEDS, HANDED_OFF). A repair rewires them — a
re-run reads clean memory and drops the FEEDS edges that made it depend on the bad source — so after
it, "why was this action repaired?" is answered from the edges as the repair found them (the plan's
checkpointed upstream map). Both go through `shortest_path`; only the edge source differs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable


@dataclass(frozen=True)
class Edge:
    """`child` depends on `parent` over `kind` ("FEEDS": it read facts `parent` wrote; "HANDED_OFF")."""

    parent: int
    child: int
    kind: str


@dataclass(frozen=True)
class Step:
    action: int
    edge: str  # how it was reached: "INGESTED" for the first step
    from_action: int | None


# Given a frontier of actions, the edges that lead into them.
Upstream = Callable[[list[int]], Iterable[Edge]]


def shortest_path(*, starts: Iterable[int], target: int, upstream: Upstream) -> list[Step]:
    """The shortest chain from an action in `starts` (those that ingested the source) to `target`,
    searched backwards from `target` one level at a time; [] when `target` does not depend on any start.
    Ties between equally short chains go to the lowest action ids, level by level."""
    starts = set(starts)
    if target in starts:
        return [Step(target, "INGESTED", None)]
    toward: dict[int, Edge] = {}  # action -> the edge that leads from it toward the target
    seen, frontier = {target}, [target]
    found = None
    while frontier and found is None:
        nxt = []
        for edge in sorted(upstream(frontier), key=lambda e: (e.parent, e.child, e.kind)):
            if edge.parent in seen:
                continue
            seen.add(edge.parent)
            toward[edge.parent] = edge
            nxt.append(edge.parent)
        hits = sorted(a for a in nxt if a in starts)
        found = hits[0] if hits else None
        frontier = sorted(nxt)
    if found is None:
        return []
    steps, node = [Step(found, "INGESTED", None)], found
    while node != target:
        edge = toward[node]
        steps.append(Step(edge.child, edge.kind, node))
        node = edge.child
    return steps


def graph_upstream(ro_query, predecessors_cypher: str) -> Upstream:
    """Edges into a frontier, read from a workspace graph (the PREDECESSORS query)."""
    def upstream(frontier: list[int]) -> Iterable[Edge]:
        return [Edge(parent, child, kind) for child, parent, kind in ro_query(predecessors_cypher, {"ids": frontier})]
    return upstream


def recorded_upstream(upstream_map: dict[int, list[tuple[int, str, list]]], within: set[int]) -> Upstream:
    """Edges into a frontier, from a repair's checkpointed map {action: [(parent, kind, facts), ...]},
    restricted to the actions `within` the repair."""
    def upstream(frontier: list[int]) -> Iterable[Edge]:
        return [Edge(pid, aid, kind) for aid in frontier for pid, kind, _ in upstream_map.get(aid, ()) if pid in within]
    return upstream
