"""The steps a repair plan is applied with: which Cypher each kind of row goes through, in what order,
and how the walk's staged rows become steps.

Apply order matters for idempotence: the re-runs' old READ/FEEDS edges are dropped before the new
ones are merged, so applying any suffix of the steps again converges to the same graph.
"""
from __future__ import annotations

from provenance.graph import queries
from provenance.graph.graph import Graph, id_set
from repairs import queries as repair_queries

STEP_QUERIES = {
    "drop_reads": repair_queries.DROP_READS,
    "drop_feeds": repair_queries.DROP_FEEDS_INTO,
    "status": repair_queries.SET_ACTION_STATUS,
    "rerun": repair_queries.SET_ACTION_RERUN,
    "invalidate_facts": repair_queries.INVALIDATE_FACTS,
    "invalidate_effects": repair_queries.INVALIDATE_EFFECTS,
    "actions": repair_queries.CREATE_ACTIONS_IDEMPOTENT,
    "handoffs": queries.CREATE_HANDOFFS,  # as plans checkpointed before the *_sets kinds hold them
    "handoff_sets": repair_queries.CREATE_HANDOFFS_OF_SET,
    "ingests": queries.CREATE_INGESTS,
    "facts": repair_queries.CREATE_FACTS_IDEMPOTENT,
    "reads": queries.CREATE_READS,
    "read_sets": repair_queries.CREATE_READS_OF_SET,
    "feeds": queries.CREATE_FEEDS,
    "feed_sets": repair_queries.CREATE_FEEDS_OF_SET,
    "effects": repair_queries.CREATE_EFFECTS_IDEMPOTENT,
    "effect_sets": repair_queries.CREATE_EFFECTS_OF_SET,
}
STEP_ORDER = list(STEP_QUERIES)
# Steps that take their nodes as an id set (provenance.graph.graph.id_set): one range scan instead of a lookup per row.
ONE_NODE_PER_ROW = ("drop_reads", "drop_feeds", "status", "rerun", "invalidate_effects", "handoff_sets", "read_sets",
                    "feed_sets", "effect_sets")
CHUNK = 5000
# An id set's slot list spans its lowest to highest id; ids further apart than this (the id ranges of a
# repair walked in parts) go in separate queries rather than one list of mostly zeros.
MAX_GAP = 1000


def _by_action(rows: list[dict], key: str, item: str) -> list[dict]:
    grouped: dict[int, list] = {}
    for r in rows:
        grouped.setdefault(r[key], []).append(r[item] if item else {k: v for k, v in r.items() if k != key})
    return [{"id": aid, "items": items} for aid, items in grouped.items()]


def grouped_rows(rows: dict[str, list]) -> dict[str, list]:
    """The walk's staged rows (one per edge or effect, as the recording session stages them) with the
    edges and effects of new and re-run actions regrouped one row per action: matching each row's
    action by id in an UNWIND cost ~5x the range scan of an id set (~150 of ~300 ms of applying a
    1,500-ticket repair)."""
    out = {k: v for k, v in rows.items() if k not in ("handoffs", "reads", "feeds", "effects")}
    out["handoff_sets"] = [{"id": r["child"], "parent": r["parent"]} for r in rows.get("handoffs", [])]
    out["read_sets"] = _by_action(rows.get("reads", []), "reader", "fact")
    out["feed_sets"] = _by_action(rows.get("feeds", []), "reader", "writer")
    out["effect_sets"] = _by_action(rows.get("effects", []), "action", "")
    return out


def plan_steps(rows: dict[str, list]) -> list[tuple[str, list]]:
    """Rows by kind as the plan's steps: in STEP_ORDER, at most CHUNK rows each."""
    steps = []
    for kind in STEP_ORDER:
        kind_rows = rows.get(kind, [])
        for i in range(0, len(kind_rows), CHUNK):
            steps.append((kind, kind_rows[i:i + CHUNK]))
    return steps


def _dense_runs(ids: list[int]) -> list[tuple[int, int]]:
    """(start, end) index ranges of `ids` (sorted) with no gap above MAX_GAP inside."""
    runs, start = [], 0
    for i in range(1, len(ids)):
        if ids[i] - ids[i - 1] > MAX_GAP:
            runs.append((start, i))
            start = i
    runs.append((start, len(ids)))
    return runs


def apply_step(graph: Graph, step: tuple[str, list]) -> None:
    kind, rows = step
    if kind in ("drop_reads", "drop_feeds", "status", "rerun", "invalidate_effects"):
        ids = rows if kind in ("drop_reads", "drop_feeds") else [r["id"] for r in rows]
        graph.query(STEP_QUERIES[kind], {**id_set(ids), "rows": rows})
        return
    if kind in ONE_NODE_PER_ROW:
        rows = sorted(rows, key=lambda r: r["id"])
        ids = [r["id"] for r in rows]
        for start, end in _dense_runs(ids):
            graph.query(STEP_QUERIES[kind], {**id_set(ids[start:end]), "rows": rows[start:end]})
        return
    graph.query(STEP_QUERIES[kind], {"rows": rows})
