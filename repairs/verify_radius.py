"""Verification in proportion to the damage: re-execute only what a clean run could change, then check
the boundary around it without re-running anything (docs/verification.md has the argument).

1. The set: the actions that ingested the flagged source, closed over what they handed off and over the
   fact versions they wrote: an action joins when it read a member's version, or read the same key past
   one (a member's version below it, older than the one it read or with nothing read), at any depth.
   Computed from the repaired graph's own edges, not from the repair's plan.
2. Re-execution: the baseline recorder (provenance.recording.recorder.GraphRecorder, effects "sandbox") runs
   each recording of the set from its first member, in commit order, its handoffs depth first, against
   the repaired memory with every version the set wrote left out; each read resolves against the
   snapshot the original had. Compared with what the set stands for in the repaired graph (active facts
   of its keys, standing decisions of its tickets, live effects), as the full diff compares the desk.
3. The boundary: no action outside the set read a version the set wrote (one graph query over those
   versions), and the desk's live actions, live effects and active facts outside the set number what
   they did just before the repair was applied (boundary_counts, taken under the graph's lock).
"""
from __future__ import annotations

import json
import time
from collections import defaultdict

from provenance.graph import top_ids
from provenance.recording.action_record import content_digest
from provenance.graph.fact_index import KeyedFactIndex
from provenance.graph.graph import Graph, id_set, workspace_graph
from provenance.llm import get_client
from provenance.recording.recorder import GraphRecorder
from provenance.recording.replay import RemoteAgent
from provenance.recording.selectors import EVERYTHING, ingesters, traced_actions
from provenance.vocabulary import DEAD, ActionStatus
from repairs import queries
from repairs.verify import diff_states

# How far apart the re-executed actions of one recording are slotted above its first member's seq: its
# handoffs ran right after it, and no action outside the set lies between (docs/verification.md).
SLOT = 1e-7


def boundary_counts(graph: Graph, *, below: float = EVERYTHING) -> dict:
    """The desk's live actions, live effects and active facts below `below`, and its highest ids: taken
    just before a repair is applied, under the graph's lock, so the boundary can be counted after it."""
    c = graph.ro_query(queries.DESK_COUNTS, {"below": below, "dead": list(DEAD)})[0]
    return {"actions": c.actions, "effects": c.effects, "facts": c.facts,
            "top": [c.top_action or 0, c.top_fact or 0, c.top_effect or 0], "bound": float((c.top_action or 0) + 1)}


def radius_set(graph: Graph, seeds: list[int], *, below: float) -> set[int]:
    """The seeds closed over handoffs and over readers of the versions they write (module docstring)."""
    members = {s for s in seeds}
    frontier = sorted(members)
    written: dict[str, list[float]] = defaultdict(list)  # key -> seqs of the members' versions
    while frontier:
        found: list[int] = []
        new_keys: set[str] = set()
        for edge in graph.ro_query(queries.MEMBER_EDGES, {**id_set(frontier), "below": below}):
            if edge.kind == "child":
                found.append(edge.id)
            else:
                written[edge.key].append(edge.seq)
                new_keys.add(edge.key)
        if new_keys:
            after = min(min(written[k]) for k in new_keys)
            for r in graph.ro_query(queries.READERS_OF_WRITTEN, {"keys": sorted(new_keys), "after": after,
                                                                 "below": below}):
                if r.id not in members and _reads_past_a_member(r, written):
                    found.append(r.id)
        frontier = sorted(set(found) - members)
        members.update(frontier)
    return members


def _reads_past_a_member(reader, written: dict[str, list[float]]) -> bool:
    read_at = {k: s for k, s in reader.versions if k is not None}
    for key in set(reader.read_keys or ()) & set(written):
        got = read_at.get(key)
        if any(w < reader.seq and (got is None or got <= w) for w in written[key]):
            return True
    return False


class CleanView(KeyedFactIndex):
    """The repaired memory with every version the set wrote left out: what its re-execution reads."""

    def __init__(self, graph: Graph, *, below: float | None, members: set[int], first_new: int) -> None:
        super().__init__(graph, below=below)
        self._members, self._first_new = members, first_new

    def _hide_members(self, keys) -> None:
        for key in keys:
            for fv in self.by_key.get(key, ()):
                if fv.writer in self._members and fv.id < self._first_new:
                    fv.active = False

    def _load_heads(self, keys: list[str]) -> None:
        super()._load_heads(keys)
        self._hide_members(keys)

    def _load_whole(self, key: str) -> None:
        super()._load_whole(key)
        self._hide_members([key])


def verify_radius(incident, *, excluded: set[str], through: float | None, before: dict) -> dict:
    """The incremental verification of an applied repair: the diff counts and rows, as diff_states gives
    them, with what it cost (scope, set size, actions re-run, replay calls, seconds) and the boundary."""
    started = time.monotonic()
    workspace = incident.workspace
    graph = workspace_graph(workspace.name)
    below = through if through is not None else before["bound"]
    seeds = [a for a in ingesters(graph, incident.source_id)]
    members = radius_set(graph, seeds, below=below) if seeds else set()
    actions = {a.id: a for a in graph.ro_query(queries.MEMBER_ACTIONS, id_set(sorted(members)))} if members else {}
    members = {a for a, row in actions.items() if row.seq < below}
    rerun = _re_execute(incident, graph, actions, members, excluded=excluded, below=below)
    repaired, baseline, facts, effects = _sides(graph, actions, members, rerun, below=below)
    out = diff_states(repaired, baseline)
    boundary = _boundary(incident, graph, actions, members, facts, effects, before=before, below=below)
    for problem in boundary["problems"]:
        out["rows"].append({"table": problem["table"], "side": "boundary", "row": problem})
        out[problem["table"]] += 1
    out.update(scope="radius", set_size=len(members), actions_rerun=len(rerun["records"]),
               replay_calls=rerun["replay_calls"], seconds=round(time.monotonic() - started, 3),
               boundary={k: v for k, v in boundary.items() if k != "problems"})
    return out


def _re_execute(incident, graph: Graph, actions: dict, members: set[int], *, excluded: set[str],
                below: float) -> dict:
    workspace = incident.workspace
    session = GraphRecorder(graph=graph, workspace=workspace.name, effects="sandbox", load=False,
                               sources=dict(workspace.sources.values_list("source_id", "content")),
                               excluded_sources=excluded)
    top = top_ids.max_ids(graph)
    session.number_from((top.action or 0) + 1, (top.fact or 0) + 1, (top.effect or 0) + 1)
    session.facts = CleanView(graph, below=below, members=members, first_new=(top.fact or 0) + 1)
    # Every member runs as a clean run would, a flagged source's ingest answering None (the full baseline
    # does the same): a digest of the source then writes nothing, which is what its masking leaves.
    firsts = sorted((a for a in members if actions[a].parent not in members), key=lambda a: (actions[a].seq, a))
    records, remote = [], 0
    traced = traced_actions(workspace=workspace.name)
    for first in firsts:
        row = actions[first]
        if (row.status in DEAD and row.incident != incident.pk) or first in traced:
            continue  # not in the clean run: taken out by an earlier repair, or from a trace (never re-run)
        hidden = (row.snap, row.rstart) if row.snap is not None else None
        stack = [(row.agent, json.loads(row.payload), row.parent, first)]
        slot = 0
        while stack:
            agent, payload, parent, aid = stack.pop()
            remote += isinstance(session.agent(agent), RemoteAgent)
            record = session.execute(agent, payload, id=aid, seq=row.seq + slot * SLOT, parent=parent, hidden=hidden)
            slot += 1
            session.commit(record, status=ActionStatus.OK, root=parent is None, sink=defaultdict(list))
            records.append(record)
            stack.extend((a, p, record.id, session.allocate_action_id()) for a, p in reversed(record.handoffs))
    get_client().flush()  # the model answers it computed, cached as the baseline's are
    return {"records": records, "replay_calls": remote}


def _sides(graph: Graph, actions: dict, members: set[int], rerun: dict, *, below: float):
    """export_state's three tables over what the set touches, for the repaired graph and for its re-run;
    versions, decisions and effects outside the set stand on both sides alike."""
    ids = id_set(sorted(members)) if members else None
    facts = list(graph.ro_query(queries.MEMBER_FACTS, ids)) if ids else []
    effects = list(graph.ro_query(queries.MEMBER_EFFECTS, ids)) if ids else []
    records = rerun["records"]
    keys = sorted({f.key for f in facts} | {w["key"] for r in records for w in r.writes})
    tickets = sorted({a.ticket for a in actions.values() if a.ticket} | {r.ticket for r in records if r.ticket})
    active = list(graph.ro_query(queries.ACTIVE_OF_KEYS, {"keys": keys, "below": below})) if keys else []
    standing = list(graph.ro_query(queries.DECISIONS_OF_TICKETS, {"tickets": tickets, "below": below,
                                                                  "dead": list(DEAD)})) if tickets else []
    outside_facts = [(f.key, f.seq, f.version, json.loads(f.value)) for f in active if f.writer not in members]
    outside_decisions = [(d.ticket, d.seq, json.loads(d.decision)) for d in standing if d.action not in members]
    repaired = _state([(f.key, f.seq, f.version, json.loads(f.value)) for f in active],
                      [(d.ticket, d.seq, json.loads(d.decision)) for d in standing],
                      [e for e in effects if e.live])
    versions: dict[str, int] = defaultdict(int)
    rerun_facts = []
    for r in records:
        for w in r.writes:
            versions[w["key"]] += 1
            rerun_facts.append((w["key"], r.seq, versions[w["key"]], w["value"]))
    baseline = _state(outside_facts + rerun_facts,
                      outside_decisions + [(r.ticket, r.seq, r.decision) for r in records if r.ticket],
                      [_effect_row(e) for r in records for e in r.effects])
    return repaired, baseline, facts, effects


def _effect_row(e: dict):
    return queries.MemberEffect(0, e["kind"], e["ticket"], e["amount"], e["currency"],
                                json.dumps(e["details"], sort_keys=True), True, None)


def _state(facts: list[tuple], decisions: list[tuple], effects: list) -> dict:
    current: dict[str, tuple] = {}
    for key, seq, version, value in facts:
        if key not in current or (seq, version) > current[key][:2]:
            current[key] = (seq, version, value)
    standing: dict[str, tuple] = {}
    for ticket, seq, d in decisions:
        if "choice" in d and (ticket not in standing or seq > standing[ticket][0]):
            standing[ticket] = (seq, d)
    return {
        "facts": [{"key": k, "value": current[k][2]} for k in sorted(current)],
        "decisions": [{"ticket": t, "choice": standing[t][1]["choice"], "level": standing[t][1].get("level")}
                      for t in sorted(standing)],
        "effects": sorted(({"kind": e.kind, "ticket": e.ticket, "amount_cents": e.amount, "currency": e.currency,
                            "content": content_digest(json.loads(e.details or "{}"))} for e in effects),
                          key=lambda e: (e["kind"], e["ticket"] or "", e["amount_cents"], e["content"])),
    }


def _boundary(incident, graph: Graph, actions: dict, members: set[int], facts: list, effects: list, *,
              before: dict, below: float) -> dict:
    """Outside the set nothing read what the set wrote, and nothing was added, ended or retired."""
    problems = []
    changed = [f.id for f in facts]
    if changed:
        for read in graph.ro_query(queries.OUTSIDE_READERS_OF, {**id_set(sorted(members)), "changed": changed,
                                                                "below": below}):
            problems.append({"table": "facts", "problem": "read outside the set", "action": read.action,
                             "fact": read.fact})
    after = boundary_counts(graph, below=below)
    top_action, top_fact, top_effect = before["top"]
    mine = incident.pk
    # What the set held live just before the repair: what was there then and is live now, or ended by it.
    was_live = sum(1 for a in members if a <= top_action and (actions[a].status not in DEAD or actions[a].incident == mine))
    was_effects = sum(1 for e in effects if e.id <= top_effect and (e.live or e.invalidated_by == mine))
    was_facts = sum(1 for f in facts if f.id <= top_fact and (f.active or f.invalidated_by == mine))
    outside = {
        "actions": (before["actions"] - was_live, after["actions"] - sum(1 for a in members if actions[a].status not in DEAD)),
        "effects": (before["effects"] - was_effects, after["effects"] - sum(1 for e in effects if e.live)),
        "facts": (before["facts"] - was_facts, after["facts"] - sum(1 for f in facts if f.active)),
    }
    for what, (then, now) in outside.items():
        if then != now:
            problems.append({"table": "effects" if what == "effects" else "facts" if what == "facts" else "decisions",
                             "problem": f"live {what} outside the set changed", "before": then, "after": now})
    return {"outside": {k: v[1] for k, v in outside.items()}, "problems": problems}
