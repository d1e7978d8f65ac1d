"""What a failed recording owes the graph, kept until the graph takes it back.

A recording's Postgres transaction rolls back when its flush fails; GraphRecorder.discard then deletes
from the graph what the session flushed. When FalkorDB is the failure (killed while the flush's write
was applied and its answer lost), that delete cannot reach it, yet the server's append-only file keeps
the write and replays it on restart: an orphan root with no Postgres rows beside the root the client
records again. So the discard writes the exact id ranges it owes to a GraphDebt row, on a connection of
its own (the failing transaction's rows roll back; this one must not), and they are paid:

- by every writer of the workspace's graph, inside provenance.recording.services.workspace_lock: the lock's last
  statement asks whether anything is owed (no extra round trip when nothing is), and the ranges are
  deleted before the writer reads the graph's top ids. Each range is deleted before any id in it can
  be handed out again (every id that reaches the graph is numbered under that lock), so a deletion
  never hits a node of a later recording; the debt rows go in the writer's transaction, so they come
  back if it rolls back (and what it flushed in the range is then an orphan too);
- before a repair walks (it walks a snapshot without the lock: provenance.recording.services.settle_owed takes it
  for a moment);
- by the outage sweep (repairs.outages) once the workspace's server answers.

Postgres, not a file or Redis: it is the one durable store every web process and worker shares, the
lock that orders the graph's writers is in it, and the payment's delete of the rows commits with the
paying writer's own rows.
"""
from __future__ import annotations

import logging

from django.db import DEFAULT_DB_ALIAS, connections

from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import GraphDebt

log = logging.getLogger(__name__)

# The nodes of one owed range, by label through its id index (DETACH takes their edges along).
DELETE_ACTIONS = "MATCH (n:Action) WHERE n.id > $above AND n.id <= $upto DETACH DELETE n"
DELETE_FACTS = "MATCH (n:Fact) WHERE n.id > $above AND n.id <= $upto DETACH DELETE n"
DELETE_EFFECTS = "MATCH (n:Effect) WHERE n.id > $above AND n.id <= $upto DETACH DELETE n"
_RANGES = (("action", DELETE_ACTIONS), ("fact", DELETE_FACTS), ("effect", DELETE_EFFECTS))

OWED_SQL = f"EXISTS (SELECT 1 FROM {GraphDebt._meta.db_table} WHERE workspace = %s)"


def flushed_tops(pending: dict, tops: tuple[int, int, int]) -> tuple[int, int, int]:
    """The highest action, fact and effect ids written so far, with a flush's queued rows."""
    return tuple(max(top, max((r["id"] for r in pending.get(kind, ())), default=top))
                 for kind, top in zip(("actions", "facts", "effects"), tops))


def owe(*, workspace: str, loaded: tuple[int, int, int], flushed: tuple[int, int, int]) -> bool:
    """Keep the ranges (loaded, flushed] a failed discard leaves in `workspace`'s graph, committed at
    once on a connection apart from the caller's (which is rolling back). False when nothing was
    flushed; logs and gives up when Postgres is away too (nothing durable is left to write to)."""
    flushed = tuple(max(low, top) for low, top in zip(loaded, flushed))
    if flushed == tuple(loaded):
        return False
    columns = ("workspace", "action_above", "action_upto", "fact_above", "fact_upto", "effect_above",
               "effect_upto", "created_at")
    values = [workspace, loaded[0], flushed[0], loaded[1], flushed[1], loaded[2], flushed[2]]
    apart = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with apart.cursor() as cur:  # autocommit: durable before the failing request answers
            cur.execute(f"INSERT INTO {GraphDebt._meta.db_table} ({', '.join(columns)}) "
                        f"VALUES ({', '.join(['%s'] * 7)}, now())", values)
    except Exception:
        log.exception("could not keep what the failed recording in %s owes its graph", workspace)
        return False
    finally:
        apart.close()
    owed = ", ".join(f"{kind} {low + 1}..{top}" for kind, low, top in zip(("actions", "facts", "effects"), loaded, flushed)
                     if top > low)
    log.warning("the graph of %s is unreachable: the failed recording's %s are owed and deleted before its next "
                "writer", workspace, owed)
    return True


def settle(workspace: str) -> int:
    """Delete every owed range of `workspace` from its graph and the debt rows (in the caller's
    transaction, which holds the workspace's lock). Returns the ranges paid; raises GraphUnavailable
    when the graph is still away (the caller's write would fail as well)."""
    debts = list(GraphDebt.objects.filter(workspace=workspace).order_by("pk"))
    if not debts:
        return 0
    graph = workspace_graph(workspace)
    for debt in debts:
        for kind, cypher in _RANGES:
            above, upto = getattr(debt, f"{kind}_above"), getattr(debt, f"{kind}_upto")
            if upto > above:
                graph.query(cypher, {"above": above, "upto": upto})
    graph.query(queries.DISCARD_ORPHAN_SOURCES)
    GraphDebt.objects.filter(pk__in=[d.pk for d in debts]).delete()
    log.warning("paid %d owed range(s) of %s's graph", len(debts), workspace)
    return len(debts)

