"""Read-only questions about a workspace's provenance graph."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import partial


from provenance.graph import mirror, paths, queries
from provenance.recording.action_record import content_digest
from provenance.graph.graph import Graph, workspace_graph
from provenance.graph.mirror import DEAD
from provenance.graph.rows import RadiusAction
from provenance.models import Source, Ticket, Workspace
from provenance.recording.recorder import UnknownSource



def ingesters(graph: Graph, source: str) -> list[int]:
    return [r[0] for r in graph.ro_query(queries.INGESTERS, {"source": source})]


def ticket_ingesters(graph: Graph, source: str) -> list[int]:
    """The actions that ingested `source` while working a ticket (their payload names one)."""
    return [r[0] for r in graph.ro_query(queries.TICKET_INGESTERS, {"source": source})]


def reachable(graph: Graph, start: list[int]) -> set[int]:
    """Every action reachable from `start` over FEEDS|HANDED_OFF, each visited once (level-wise BFS in
    the graph: the bench's baseline, and what explain_path walks)."""
    seen = set(start)
    frontier = list(start)
    while frontier:
        nxt = [r[0] for r in graph.ro_query(queries.SUCCESSORS, {"ids": frontier})]
        frontier = [i for i in nxt if i not in seen]
        seen.update(frontier)
    return seen


def _radius(graph: Graph, source: str) -> tuple[list[tuple[int, str, float, str | None]], int, list[tuple[str, int]]]:
    """(live actions as (id, agent, seq, ticket) in seq order, distinct tickets among them, live effects
    of every reached action as (kind, cents)), from the in-process topology mirror when it is ready,
    else from one algo.BFS in FalkorDB (the same answer: tests hold them equal)."""
    with mirror.gc_paused(), mirror.reading_if_ready(graph) as topo:
        if topo is not None:
            reached = topo.reach(source)
            live = topo.live_in_seq_order(reached)
            actions = [(i, topo.agent[i], topo.seq[i], topo.ticket[i]) for i in live]
            effects = [(kind, amount) for i in reached for kind, amount, is_live in topo.effects.get(i, ()) if is_live]
        else:
            actions, effects = _radius_in_graph(graph, source)
    tickets = len({a[3] for a in actions if a[3] is not None})
    return actions, tickets, effects


def _radius_in_graph(graph: Graph, source: str) -> tuple[list[tuple[int, str, float, str | None]], list[tuple[str, int]]]:
    found: dict[int, tuple[int, str, float, str | None]] = {}
    effects: dict[int, tuple[str, int]] = {}
    for packed, tickets, packed_effects in graph.ro_query(queries.RADIUS_PREVIEW, {"source": source, "dead": list(DEAD)}):
        for item, ticket in zip(packed.split(",") if packed else [], tickets):
            aid, seq, agent, has_ticket = item.split(":")
            found[int(aid)] = (int(aid), agent, float(seq), ticket if has_ticket == "1" else None)
        for item in packed_effects.split(",") if packed_effects else []:
            eid, kind, amount = item.split(":")
            effects[int(eid)] = (kind, int(amount))
    actions = sorted(found.values(), key=lambda a: (a[2], a[0]))
    return actions, [effects[e] for e in sorted(effects)]


# RadiusAction((id, seq)) without the named tuple's Python-level constructor: a third of the warm answer.
_radius_action = partial(tuple.__new__, RadiusAction)


def radius_actions(graph: Graph, source: str, *, build_mirror: bool = True) -> list[RadiusAction]:
    """(id, seq) of the live actions downstream of `source`, in seq (re-execution) order: from the
    mirror when it is ready, else from one algo.BFS in FalkorDB. With build_mirror off a missing or
    outdated mirror is not read for later (mirror.reading_if_current)."""
    reading = mirror.reading_if_ready if build_mirror else mirror.reading_if_current
    # The pause covers the background read's start too (reading_if_ready starts it on the way out), so
    # the collection the answer's objects are due is not run in front of the caller.
    with mirror.gc_paused(), reading(graph) as topo:
        if topo is not None:
            live = topo.live_in_seq_order(topo.reach(source))
            return list(map(_radius_action, zip(live, map(topo.seq.__getitem__, live))))
        return _radius_actions_cold(graph, source)


def _radius_actions_cold(graph: Graph, source: str) -> list[RadiusAction]:
    """radius_actions_in_graph's answer for a process without a mirror yet, parsed with C-level calls
    only (one split of the whole string, map, two sorts) instead of a split and a tuple per action:
    a quarter less client time at 30k actions. Tests hold it equal to the oracle below."""
    found: dict[int, float] = {}
    for (packed,) in graph.ro_query(queries.RADIUS_ACTIONS, {"source": source, "dead": list(DEAD)}):
        if packed:
            flat = packed.replace(":", ",").split(",")
            found.update(zip(map(int, flat[0::2]), map(float, flat[1::2])))
    ids = sorted(found)
    ids.sort(key=found.__getitem__)  # stable: (seq, id) order
    return list(map(_radius_action, zip(ids, map(found.__getitem__, ids))))


def radius_actions_in_graph(graph: Graph, source: str) -> list[RadiusAction]:
    """The same answer from one algo.BFS inside FalkorDB, without the mirror: the oracle the mirror is
    tested against, and the bench's comparison."""
    found: dict[int, float] = {}
    for (packed,) in graph.ro_query(queries.RADIUS_ACTIONS, {"source": source, "dead": list(DEAD)}):
        for item in packed.split(",") if packed else []:
            aid, seq = item.split(":")
            found[int(aid)] = float(seq)
    return [RadiusAction(*a) for a in sorted(found.items(), key=lambda a: (a[1], a[0]))]


def _check_source(workspace: Workspace, source: str) -> None:
    if not Source.objects.filter(workspace=workspace, source_id=source).exists():
        raise UnknownSource(f"unknown source {source!r} in workspace {workspace.name!r}")


def whole_seq(seq: float) -> int | float:
    """A seq as people read it: FalkorDB returns every seq as a float, but recorded actions have whole
    seqs ("3", not "3.0"); only actions a repair slotted in between keep their fraction ("3.5")."""
    return int(seq) if float(seq).is_integer() else seq


def workspace_currency(*, workspace_id: int) -> str | None:
    """The one currency of the workspace's tickets, which its refunds and its agents' decision amounts
    are in; None when the tickets use several (or there are none), so nothing guesses a currency."""
    found = list(Ticket.objects.filter(workspace_id=workspace_id).order_by().values_list("currency", flat=True)
                 .distinct()[:2])
    return found[0] if len(found) == 1 else None


def blast_radius(*, workspace: Workspace, source: str, limit: int | None = None, offset: int = 0) -> dict:
    """The preview of what flagging `source` would touch: actions in seq order, tickets, live effects.
    `offset`/`limit` page the listed actions; the totals always cover the whole radius."""
    _check_source(workspace, source)
    graph = workspace_graph(workspace.name)
    actions, tickets, effects = _radius(graph, source)
    by_agent: dict[str, int] = {}
    for a in actions:
        by_agent[a[1]] = by_agent.get(a[1], 0) + 1
    listed = actions[offset:] if limit is None else actions[offset:offset + limit]
    return {
        "source": source,
        "actions": [{"id": a[0], "agent": a[1], "seq": whole_seq(a[2]), "ticket": a[3]} for a in listed],
        "size": len(actions),
        "tickets": tickets,
        "effects": len(effects),
        "amount_at_stake": sum(amount for kind, amount in effects if kind == "refund") / 100,
        "by_agent": by_agent,
        "effects_by_kind": {k: sum(1 for e in effects if e[0] == k) for k in sorted({e[0] for e in effects})},
    }


def explain_path(*, workspace: str, source: str, action_id: int) -> list[dict]:
    """The shortest FEEDS|HANDED_OFF chain in the live graph from an action that INGESTED `source` to
    `action_id`, one dict per step (the action, how it was reached, the facts it read, its handoffs).
    [] when the action does not depend on the source in the graph as it is now; a repair removes that
    dependence, so the API and MCP ask repairs.explain.explain_action, which knows repaired actions."""
    ws = Workspace.objects.filter(name=workspace).first()
    if ws is None:
        raise LookupError(f"unknown workspace {workspace!r}")
    _check_source(ws, source)
    graph = workspace_graph(workspace)
    if not graph.ro_query(queries.ACTION_SUMMARIES, {"ids": [action_id]}):
        raise LookupError(f"unknown action {action_id} in workspace {workspace!r}")
    chain = paths.shortest_path(starts=ingesters(graph, source), target=action_id,
                                upstream=paths.graph_upstream(graph.ro_query, queries.PREDECESSORS))
    if not chain:
        return []
    path = [s.action for s in chain]
    reached_by = {s.action: (s.from_action, s.edge) for s in chain}
    summaries = {r[0]: r for r in graph.ro_query(queries.ACTION_SUMMARIES, {"ids": path})}
    reads: dict[int, list[dict]] = {a: [] for a in path}
    for reader, key, version, writer in graph.ro_query(queries.ACTION_READS, {"ids": path}):
        reads[reader].append({"key": key, "version": version, "writer": writer})
    handoffs: dict[int, list[int]] = {a: [] for a in path}
    for parent, child, edge in graph.ro_query(queries.SUCCESSOR_EDGES, {"ids": path}):
        if edge == "HANDED_OFF":
            handoffs[parent].append(child)
    steps = []
    for action in path:
        parent, edge = reached_by[action]
        facts = sorted(reads[action], key=lambda f: (f["key"], f["version"]))
        # source: set on the first step only; facts: for FEEDS, the keys read that the previous step wrote.
        how = {"edge": edge, "source": source if edge == "INGESTED" else None, "from_action": parent,
               "facts": sorted({f["key"] for f in facts if f["writer"] == parent}) if edge == "FEEDS" else []}
        _, agent, seq, ticket, status = summaries[action]
        steps.append({"action": action, "agent": agent, "seq": seq, "ticket": ticket, "status": status,
                      "reached_by": how, "facts_read": facts, "handoffs": sorted(handoffs[action])})
    return steps


EVERYTHING = 1e300  # a seq bound above every seq


def export_state(*, workspace: str, baseline: bool = False, below: float | None = None) -> dict:
    """Active facts, the standing decision per ticket and live effects (money in integer cents, the unit
    in the key: amount_cents; `content`: the digest of what the effect says), sorted for diffing; with `below`, of the actions below that seq only (a
    repair's verification while the desk records on)."""
    graph = workspace_graph(workspace, baseline=baseline)
    bound = {"below": EVERYTHING if below is None else below}
    current: dict[str, tuple] = {}
    for key, value, seq, version in graph.ro_query(queries.ACTIVE_FACTS, bound):
        if key not in current or (seq, version) > current[key][:2]:
            current[key] = (seq, version, json.loads(value))
    standing: dict[str, tuple] = {}
    for ticket, seq, decision in graph.ro_query(queries.LIVE_DECISIONS, bound):
        d = json.loads(decision)
        if "choice" in d and (ticket not in standing or seq > standing[ticket][0]):
            standing[ticket] = (seq, d)
    effects = graph.ro_query(queries.LIVE_EFFECTS, bound)
    return {
        "facts": [{"key": k, "value": current[k][2]} for k in sorted(current)],
        "decisions": [{"ticket": t, "choice": standing[t][1]["choice"], "level": standing[t][1].get("level")}
                      for t in sorted(standing)],
        # With what each says (provenance.recording.action_record.effect_content): a changed email body is a
        # different effect here, as it is to the repair.
        "effects": sorted(({"kind": e.kind, "ticket": e.ticket, "amount_cents": e.amount, "currency": e.currency,
                            "content": content_digest(json.loads(e.details or "{}"))} for e in effects),
                          key=lambda e: (e["kind"], e["ticket"] or "", e["amount_cents"], e["content"])),
    }


def fact_history(*, workspace: str, key: str) -> list[dict]:
    """Every version of a fact with its three clocks and, if invalidated, when and by which incident."""
    rows = workspace_graph(workspace).ro_query(queries.FACT_HISTORY, {"key": key})
    return [{
        "id": r[0], "value": json.loads(r[1]), "version": r[2], "seq": r[3], "active": r[4],
        "valid_from": r[5], "valid_until": r[6], "known_at": r[7], "system_at": r[8],
        "invalidated_at": r[9], "invalidated_by": r[10], "writer": r[11], "writer_agent": r[12],
    } for r in rows]


def parse_clock(ts: str | None) -> datetime | None:
    # A recorded clock without an offset (a plain date given on back-fill) is read as UTC, so that it
    # compares with the aware timestamps the recorder writes instead of raising TypeError.
    if not ts:
        return None
    parsed = datetime.fromisoformat(ts)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def fact_as_of(*, workspace: str, key: str, at: datetime, clock: str = "known") -> dict | None:
    """The value of `key` as the system knew it at `at` (clock="known"), as valid in the world at
    `at` (clock="valid"), or as stored then (clock="system"). Versions whose validity is unknown are
    never guessed to be valid."""
    return version_as_of(fact_history(workspace=workspace, key=key), at=at, clock=clock)


CLOCKS = ("known", "valid", "system")


def version_as_of(versions: list[dict], *, at: datetime, clock: str) -> dict | None:
    """Of a fact's versions (fact_history, in seq order), the one that held at `at` on `clock`:
    known — learned (known_at) and written (system_at) by then and not yet invalidated; system —
    written by then and not yet invalidated, whenever it was learned; valid — valid in the world then
    (valid_from/valid_until) and still standing."""
    if clock not in CLOCKS:
        raise ValueError("clock must be 'known', 'valid' or 'system'")
    best = None
    for v in versions:
        invalidated = parse_clock(v["invalidated_at"])
        if clock in ("known", "system"):
            known, written = parse_clock(v["known_at"]), parse_clock(v["system_at"])
            if not (written and written <= at) or (clock == "known" and not (known and known <= at)):
                continue
            if invalidated and invalidated <= at:
                continue
        else:
            start, end = parse_clock(v["valid_from"]), parse_clock(v["valid_until"])
            if start is None or start > at or (end is not None and end <= at) or not v["active"]:
                continue
        best = v
    return best


def traced_actions(*, workspace: str) -> set[int]:
    """The actions of the workspace recorded from OpenTelemetry traces (provenance.recording.otel): a trace says what
    was done, never how to do it again, so a repair cannot re-run them (repairs.engine takes them out)."""
    from provenance.models import Recording

    states = Recording.objects.filter(workspace__name=workspace, state__traced=True).values_list("state", flat=True)
    return {r["id"] for state in states for r in state.get("records", ())}
