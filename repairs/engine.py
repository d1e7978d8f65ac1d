"""The repair walk (RETRO/Warp-style selective re-execution), computed in memory into a plan.

compute_plan() reads the workspace graph, masks the actions that ingested the flagged source, walks
the blast radius in seq order and re-runs an action only when something upstream of it changed in this
repair. It writes nothing: the result is a Plan (graph mutation steps, per-action outcomes, invalidated
and replacement effects) that the caller checkpoints in Postgres and applies idempotently, so a worker
killed at any point resumes to the same result.
"""
from __future__ import annotations

import bisect
import heapq
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields, replace

from core.vocabulary import EffectRole
from provenance.graph import queries
from provenance.graph.graph import Graph
from provenance.graph.mirror import gc_paused
from provenance.progress import ProgressFn, noop
from provenance.recording.action_record import effect_content
from provenance.recording.recorder import ActionRecord, GraphRecorder, now_iso
from provenance.recording.selectors import EVERYTHING, ingesters, radius_actions, traced_actions
from provenance.vocabulary import CHANGED, COUNT_KEYS, DEAD, ActionStatus as S
from repairs.loading import Loaded
from repairs.lookahead import ModelLookahead
from repairs.steps import STEP_ORDER, grouped_rows, plan_steps


@dataclass
class Node:
    id: int
    agent: str
    seq: float
    ticket: str | None
    payload: dict
    decision: dict
    dhash: str | None
    status: str
    parent: int | None
    read_keys: list[str]
    children: list[int]
    writes: list[tuple[int, str, str]] = field(default_factory=list)  # (fact id, key, value json)
    effects: list[dict] = field(default_factory=list)
    hidden: tuple[float, float] | None = None  # the seqs its reads did not see (provenance.graph.fact_index)


@dataclass
class Plan:
    steps: list[tuple[str, list]]
    outcomes: list[dict]
    effects: list[dict]
    blast_radius: int
    counts: dict[str, int]
    # The edges that brought each outcome's action into the repair, as they stood before it:
    # {"<action id>": [[upstream action id, "FEEDS" | "HANDED_OFF", [[fact key, version], ...]], ...]}.
    # A re-run's READ and FEEDS edges are replaced in the graph, so "why was this repaired?" (the
    # admin's explain path and picture) is answered from here, not from the repaired graph.
    upstream: dict[str, list] = field(default_factory=dict)
    # What a walk over part of the radius read and changed, so that parts walked apart can be shown not
    # to have needed each other (repairs.parallel): fact keys its actions read, fact keys it wrote or
    # retired, the actions its walked actions hang off or hand off to, the poisoning actions it masked
    # without recording them, and the next free action, fact and effect ids of its session.
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    depends_on: list[int] = field(default_factory=list)
    masked: list[int] = field(default_factory=list)
    next_ids: list[int] = field(default_factory=list)
    not_rerun: list[int] = field(default_factory=list)  # traced actions taken out, not re-run (_visit)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RepairWalk:
    def __init__(self, *, graph: Graph, session: GraphRecorder, source: str, incident: int,
                 progress: ProgressFn = noop, only: list[int] | None = None, mask: bool = True,
                 below: float | None = None, radius: list | None = None):
        # `below`: the walk's snapshot (the actions below this seq); what commits meanwhile is caught
        # up with afterwards (repairs.catch_up). `only`: walk just these radius actions (one part of a parallel repair). `mask`: this walk
        # records the poisoning actions' masking; the other parts apply it to their fact mirror only.
        # `radius`: the blast radius (id, seq) when the caller has read it already.
        self.only, self.radius, self.mask_enabled = None if only is None else set(only), radius, mask
        self.below = EVERYTHING if below is None else below
        self.retired_keys: set[str] = set()
        self.masked_silently: list[int] = []
        self.forced: set[int] = set()  # re-run whatever changed upstream: ticket work that read the source
        self.maskable: set[int] = set()  # poisoning actions, masked unless their clean re-run leaves something
        self.graph, self.session, self.source, self.incident, self.progress = graph, session, source, incident, progress
        self.nodes: dict[int, Node] = {}
        self.preds: dict[int, set[int]] = {}
        self.upstream: defaultdict[int, list] = defaultdict(list)  # pre-repair edges, see Plan.upstream
        self.status: dict[int, str] = {}
        self.pending_payload: dict[int, dict] = {}
        self.rows: dict[str, list] = {k: [] for k in STEP_ORDER}
        self.outcomes: dict[int, dict] = {}
        self.effects: list[dict] = []
        self.new_seqs: list[float] = []
        self.fractional: list[float] | None = None
        self.heap: list[tuple[float, int]] = []
        self.queued: set[int] = set()
        self.changed: set[int] = set()
        self.at = now_iso()
        self.lookahead = ModelLookahead(self)
        self.hidden: dict[int, tuple[float, float]] | None = None
        self.traced = traced_actions(workspace=session.workspace)  # never re-run (_visit)

    # --- loading ---
    def _load(self, ids: list[int]) -> None:
        ids = [i for i in ids if i not in self.nodes]
        if not ids:
            return
        loaded = Loaded(self.graph, ids, self.session.facts.by_id)  # every part in one round trip
        if self.hidden is None:
            # A re-run reads the snapshot its original read: the same seqs stay hidden from it.
            self.hidden = {r.id: (r.snap, r.rstart) for r in self.graph.ro_query(queries.HIDDEN_SEQS)}
        for a in loaded.actions:
            self.nodes[a.id] = Node(a.id, a.agent, a.seq, a.ticket, json.loads(a.payload), json.loads(a.decision),
                                    a.dhash, a.status, a.parent, list(a.read_keys or []), sorted(a.children),
                                    hidden=self.hidden.get(a.id))
            self.preds.setdefault(a.id, set())
        for w in loaded.writes:
            self.nodes[w.action].writes.append((w.fact, w.key, w.value))
        for e in loaded.effects:
            self.nodes[e.action].effects.append({"id": e.id, "kind": e.kind, "ticket": e.ticket, "amount": e.amount,
                                                 "currency": e.currency, "details": json.loads(e.details or "{}"),
                                                 "live": e.live, "held": e.held})
        read_from: defaultdict[tuple[int, int], list] = defaultdict(list)
        for r, _ in loaded.reads:
            read_from[(r.action, r.writer)].append([r.key, r.version])
        for edge in loaded.preds:
            self.preds[edge.action].add(edge.other)
            self.upstream[edge.action].append([edge.other, edge.kind, sorted(read_from[(edge.action, edge.other)])
                                               if edge.kind == "FEEDS" else []])

    # --- the walk ---
    def run(self) -> Plan:
        # The apply below rewrites the graph (a new epoch), so a topology mirror read for this walk
        # would be dropped right after: one BFS in FalkorDB costs a tenth of reading it.
        radius = self.radius if self.radius is not None else radius_actions(self.graph, self.source, build_mirror=False)
        radius_ids = [r[0] for r in radius if (self.only is None or r[0] in self.only) and r[1] < self.below]
        self._load(radius_ids)
        # An action an earlier repair took out (poisoned or superseded) is not in the clean run: the
        # radius may still reach it through its old edges, but it is never re-run (that would bring it back).
        radius_ids = [i for i in radius_ids if self.nodes[i].status not in DEAD]
        walked = set(radius_ids)
        for aid in ingesters(self.graph, self.source):
            if not self.mask_enabled:
                self._load([aid])
            if aid in self.nodes and self.nodes[aid].status not in DEAD:
                if self.mask_enabled and aid in walked:
                    # Re-run as a clean run would run it, its ingest of the source answering None: ticket
                    # work stays re-run (masking it would leave the ticket unanswered); a digest is masked
                    # when its re-run leaves nothing (masking what also wrote other things loses them).
                    self.forced.add(aid)
                    if not self.nodes[aid].ticket:
                        self.maskable.add(aid)
                elif self.mask_enabled:
                    self._mask(aid)
                else:  # the same masking, kept out of this part's plan: another part records it
                    self._retire_facts(self.nodes[aid], stage=False)
                    self.changed.add(aid)
                    self.masked_silently.append(aid)
        return self.drain(radius_ids)

    def drain(self, radius_ids: list[int]) -> Plan:
        """Visit these actions (and whatever they wake) in seq order, then build the plan."""
        total = len(radius_ids)
        self.heap = [(self.nodes[i].seq, i) for i in radius_ids]
        heapq.heapify(self.heap)
        self.queued = set(radius_ids)
        done = 0
        while self.heap:
            _, aid = heapq.heappop(self.heap)
            if aid not in self.status:
                self._visit(self.nodes[aid])
            done += 1
            self.progress(min(done, total), total)
        counts = {k: 0 for k in COUNT_KEYS} | dict(Counter(self.status.values()))
        steps = plan_steps(grouped_rows(self.rows))
        upstream = {str(aid): sorted(e for e in edges if e[0] in self.outcomes)
                    for aid, edges in self.upstream.items() if aid in self.outcomes}
        reads = sorted({k for n in self.nodes.values() for k in n.read_keys})
        writes = sorted(self.retired_keys | {f["key"] for f in self.rows["facts"]})
        depends_on: set[int] = set()
        for aid in self.outcomes:
            node = self.nodes[aid]
            depends_on |= self.preds.get(aid, set())
            depends_on.update(node.children)
            if node.parent is not None:
                depends_on.add(node.parent)
        return Plan(steps, sorted(self.outcomes.values(), key=lambda o: o["seq"]), self.effects,
                    len(radius_ids), counts, upstream, reads, writes,
                    sorted(depends_on - set(self.outcomes) - set(self.masked_silently)),
                    sorted(self.masked_silently), self.session.next_ids,
                    sorted(a for a, s in self.status.items() if a in self.traced and s in DEAD))

    def _visit(self, node: Node) -> None:
        if node.status in DEAD:
            return  # woken through a key it read, but taken out by an earlier repair (see run)
        if node.id not in self.forced and self.preds.get(node.id, set()).isdisjoint(self.changed):
            self._set(node, S.SKIPPED)
            return
        if node.id in self.traced:  # from a trace, it cannot be re-run: taken out (masked if it ingested the
            # source, else superseded), its facts retired and its effects invalidated, each one a review item
            return (self._mask if node.id in self.forced else self._supersede)(node.id)
        self.lookahead.before_visit(node.id)
        payload = self.pending_payload.get(node.id, node.payload)
        record = self.session.execute(node.agent, payload, id=node.id, seq=node.seq, parent=node.parent,
                                      hidden=node.hidden)
        if node.id in self.maskable and not (record.writes or record.effects or record.handoffs):
            self._mask(node.id)
            return
        self.rows["drop_reads"].append(node.id)
        self.rows["drop_feeds"].append(node.id)
        if record.outputs() == self._old_outputs(node, payload):
            self._stage(replace(record, writes=[], effects=[], handoffs=[]), create=False)
            self._set(node, S.RERUN_SAME, after=record.decision, rerun=record)
            return
        self._retire_facts(node)
        record = self._keep_identical_effects(node, record)
        self._retire_effects(node)
        written = self._stage(record, create=False)
        self._set(node, S.RERUN_CHANGED, after=record.decision, rerun=record)
        self._wake_readers(record, written)
        self._match_handoffs(node, record)

    def _keep_identical_effects(self, node: Node, record: ActionRecord) -> ActionRecord:
        """Match the re-run's effects to the original's live ones by what each says, one at a time: an
        identical effect stays live as it was (neither undone nor done again, so nothing is drafted for
        it); the returned record keeps only the effects that found no identical original."""
        unmatched = list(record.effects)
        for e in node.effects:
            if not e["live"]:
                continue
            content = effect_content(e)
            twin = next((i for i, new in enumerate(unmatched) if effect_content(new) == content), None)
            if twin is not None:
                del unmatched[twin]
                e["kept"] = True
        return replace(record, effects=unmatched)

    def _old_outputs(self, node: Node, payload: dict) -> tuple:
        old = ActionRecord(id=node.id, agent=node.agent, payload=payload, seq=node.seq, parent=node.parent,
                           ticket=node.ticket, dhash=node.dhash)
        old.writes = [{"key": k, "value": json.loads(v)} for _, k, v in node.writes]
        old.effects = [e for e in node.effects if e["live"]]
        old.handoffs = [(self.nodes[c].agent, self.nodes[c].payload) for c in node.children
                        if c in self.nodes and self.nodes[c].status not in DEAD]
        return old.outputs()

    # --- statuses and staging ---
    def _set(self, node: Node, status: str, *, after: dict | None = None, rerun: ActionRecord | None = None) -> None:
        self.status[node.id] = status
        if status in CHANGED:
            self.changed.add(node.id)
        self.outcomes[node.id] = {
            "action_id": node.id, "agent": node.agent, "ticket": node.ticket or "", "seq": node.seq,
            "parent_id": node.parent, "status": status, "before": node.decision if status != S.NEW else None,
            "after": after if after is not None else (None if status in DEAD else node.decision),
        }
        if rerun is not None:
            self.rows["rerun"].append({
                "id": node.id, "status": status, "incident": self.incident,
                "payload": json.dumps(rerun.payload, sort_keys=True),
                "decision": json.dumps(rerun.decision, sort_keys=True), "dhash": rerun.dhash,
                "read_keys": rerun.read_keys, "prev_decision": json.dumps(node.decision, sort_keys=True),
            })
        elif status != S.NEW:
            self.rows["status"].append({"id": node.id, "status": status, "incident": self.incident})

    def _stage(self, record: ActionRecord, *, create: bool, status: str = S.NEW, root: bool = False) -> list[dict]:
        sink: defaultdict[str, list] = defaultdict(list)
        self.session.commit(record, status=status, root=root, create=create, sink=sink)
        for kind, rows in sink.items():
            self.rows[kind].extend(rows)
        for row in sink.get("effects", []):
            self.effects.append({"role": EffectRole.REPLACEMENT, "effect_id": row["id"], "action_id": record.id,
                                 "kind": row["kind"], "ticket": row["ticket"] or "", "amount_cents": row["amount"],
                                 "currency": row["currency"], "details": json.loads(row["details"])})
        return sink.get("facts", [])

    def _retire_facts(self, node: Node, *, stage: bool = True) -> None:
        for fid, key, _ in node.writes:
            if self.session.retire_fact(fid, at=self.at, incident=self.incident) and stage:
                self.rows["invalidate_facts"].append({"id": fid, "at": self.at, "incident": self.incident})
                if node.status != S.POISONED and self.status.get(node.id) != S.POISONED:
                    self.retired_keys.add(key)

    def _retire_effects(self, node: Node) -> None:
        for e in node.effects:
            if not e["live"] or e.pop("kept", False):
                continue
            e["live"] = False
            self.rows["invalidate_effects"].append({"id": e["id"], "incident": self.incident})
            # A held effect never left the system: it is cancelled, not compensated.
            self.effects.append({"role": EffectRole.CANCELLED if e["held"] else EffectRole.INVALIDATED, "effect_id": e["id"],
                                 "action_id": node.id, "kind": e["kind"], "ticket": e["ticket"] or "",
                                 "amount_cents": e["amount"], "currency": e["currency"], "details": e["details"]})

    def _mask(self, aid: int) -> None:
        node = self.nodes[aid]
        self._set(node, S.POISONED)
        self._retire_facts(node)
        self._retire_effects(node)
        for child in node.children:
            self._supersede(child)

    def _supersede(self, aid: int) -> None:
        self._load([aid])
        node = self.nodes[aid]
        if node.status in DEAD or self.status.get(aid) in DEAD:
            return
        self._set(node, S.SUPERSEDED)
        self._retire_facts(node)
        self._retire_effects(node)
        for child in node.children:
            self._supersede(child)

    # --- handoffs ---
    def _match_handoffs(self, node: Node, record: ActionRecord) -> None:
        old = [c for c in node.children if self.nodes.get(c) and self.nodes[c].status not in DEAD
               and self.status.get(c) not in DEAD]
        cursor = node.seq
        for agent, payload in record.handoffs:
            ticket = payload.get("ticket", record.ticket)
            match = next((c for c in old if self.nodes[c].agent == agent and self.nodes[c].ticket == ticket), None)
            if match is not None:
                old.remove(match)
                self.pending_payload[match] = payload
                cursor = max(cursor, self.nodes[match].seq)
            else:
                cursor = self._run_new(agent, payload, parent=node.id, after=cursor)
        for c in old:
            self._supersede(c)

    def _next_seq_after(self, seq: float) -> float:
        """The lowest seq above `seq`. Recorded actions have integer seqs (seq follows the id), so
        floor(seq) + 1 bounds it; only actions slotted in by repairs have fractional seqs, and those
        are loaded once per walk (FRACTIONAL_SEQS) or created by this walk (new_seqs)."""
        if self.fractional is None:
            self.fractional = sorted(r.seq for r in self.graph.ro_query(queries.FRACTIONAL_SEQS))
        nxt = float(math.floor(seq) + 1)
        for known in (self.fractional, self.new_seqs):
            i = bisect.bisect_right(known, seq)
            if i < len(known):
                nxt = min(nxt, known[i])
        return nxt

    def _run_new(self, agent: str, payload: dict, *, parent: int, after: float) -> float:
        """Run an unmatched handoff as a new action (and its own handoffs, depth first), slotted into
        seq order right after `after`. Returns the last seq used."""
        seq = (after + self._next_seq_after(after)) / 2
        bisect.insort(self.new_seqs, seq)
        aid = self.session.allocate_action_id()
        hidden = self.nodes[parent].hidden  # a new handoff belongs to its parent's recording
        record = self.session.execute(agent, payload, id=aid, seq=seq, parent=parent, hidden=hidden)
        node = Node(aid, agent, seq, record.ticket, payload, record.decision, record.dhash, S.NEW, parent,
                    record.read_keys, [], hidden=hidden)
        self.nodes[aid] = node
        self.upstream[aid].append([parent, "HANDED_OFF", []])
        self._set(node, S.NEW, after=record.decision)
        written = self._stage(record, create=True, status=S.NEW)
        self._wake_readers(record, written)
        last = seq
        for child_agent, child_payload in record.handoffs:
            last = self._run_new(child_agent, child_payload, parent=aid, after=last)
        return last

    def _wake_readers(self, record: ActionRecord, written: list[dict]) -> None:
        """A re-run or new action that writes a key changes what later readers of that key resolve to,
        even readers that were never downstream of it: add them to the walk."""
        keys = sorted({f["key"] for f in written})
        if not keys:
            return
        for (reader,) in self.graph.ro_query(queries.READERS_OF_KEYS, {"seq": record.seq, "keys": keys,
                                                                          "below": self.below}):
            if reader in self.status or reader == record.id:
                continue
            self._load([reader])
            self.preds[reader].add(record.id)
            self.upstream[reader].append([record.id, "FEEDS", sorted([f["key"], f["version"]] for f in written
                                                                     if f["key"] in self.nodes[reader].read_keys)])
            if reader not in self.queued:
                self.queued.add(reader)
                heapq.heappush(self.heap, (self.nodes[reader].seq, reader))


def compute_plan(*, graph: Graph, session: GraphRecorder, source: str, incident: int,
                 progress: ProgressFn = noop, only: list[int] | None = None, mask: bool = True,
                 below: float | None = None, radius: list | None = None) -> Plan:
    # Without the cyclic collector meanwhile: the walk builds ~a hundred containers per radius action, all
    # alive until the plan is built; the collector scanning them was half of loading a 38k-action radius.
    with gc_paused():
        return RepairWalk(graph=graph, session=session, source=source, incident=incident, progress=progress,
                          only=only, mask=mask, below=below, radius=radius).run()
