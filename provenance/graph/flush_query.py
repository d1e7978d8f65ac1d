"""The recorder's flush as one query: every kind of row it writes (actions, handoffs, ingests, facts,
reads, feeds, effects), each part the per-kind UNWIND of provenance.graph.queries under a parameter of
its own, in the order they used to be sent one by one.

One query instead of one per kind because FalkorDB applies a query whole or not at all, and a commit then
costs one round trip and one graph lock instead of seven (docs/how-it-works.md, "One write per commit",
has the measurement). Each part ends in `WITH count(*)`: an aggregate answers one row even over no rows,
so a kind with nothing to write passes the next part on instead of ending the query, and it is eager,
so the nodes a part creates are in the graph before the next part matches them (a reader's READ of a
fact its own recording wrote). The query's text is fixed: a kind without rows is an empty list.
"""
from __future__ import annotations

from provenance.graph import queries

KINDS = ("actions", "handoffs", "ingests", "facts", "reads", "feeds", "effects")
_PARTS = {
    "actions": queries.CREATE_ACTIONS, "handoffs": queries.CREATE_HANDOFFS, "ingests": queries.CREATE_INGESTS,
    "facts": queries.CREATE_FACTS, "reads": queries.CREATE_READS, "feeds": queries.CREATE_FEEDS,
    "effects": queries.CREATE_EFFECTS,
}
FLUSH = "\nWITH count(*) AS written\n".join(_PARTS[kind].strip().replace("$rows", f"${kind}") for kind in KINDS)


def params(pending: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The query's parameters for a flush's queued rows (by kind, as GraphRecorder queues them)."""
    unknown = set(pending) - set(KINDS)
    if unknown:
        raise ValueError(f"rows of no kind the flush writes: {sorted(unknown)}")
    return {kind: pending.get(kind, []) for kind in KINDS}
