"""The recorder: every agent memory read, write, handoff and external effect becomes graph structure.

Agents call `rec.ingest`, `rec.get`, `rec.set`, `rec.handoff`, `rec.effect` and `rec.ask` (a model
call). A GraphRecorder executes agents against a mirror of the workspace's facts, so each read is
resolved in memory (the latest active version written before the reader's seq, as the article's
read-resolution query does) and its READ and FEEDS edges are queued with it. Writes go to FalkorDB in
UNWIND batches, every kind of row of a flush in one query (provenance.graph.flush_query): one Cypher
round trip per op caps a recorder near 2,000 ops/s, batches go past 5,000 without changing what any
read returns.
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable

from provenance import validation
from provenance.graph import contained_view, flush_query, graph_debts, pipelined, queries, top_ids
from provenance.recording.action_record import ActionRecord, Read  # noqa: F401 - Read: part of the recorder's API
from provenance.agents import NAME_PATTERN, get_agent, registered_names
from provenance.recording.decisions import MalformedDecision, check_decision, decision_hash, now_iso  # noqa: F401 - part of the recorder's API
from provenance.graph.fact_index import FactIndex, FactVersion, KeyedFactIndex  # noqa: F401 - FactIndex, FactVersion: part of the recorder's API
from provenance.graph.graph import Graph, GraphUnavailable
from provenance.llm import get_client
from provenance.vocabulary import ActionStatus

FLUSH_EVERY = 2000


class UnknownSource(LookupError):
    pass


class ActionRecorder:
    """The only door from an agent to memory, the outside world and the model."""

    def __init__(self, session: "GraphRecorder", record: ActionRecord):
        self._session = session
        self._record = record
        self._facts_read: dict[str, Any] = {}

    @property
    def action_id(self) -> int:
        return self._record.id

    @property
    def ticket(self) -> str | None:
        return self._record.ticket

    @property
    def workspace(self) -> str:
        return self._session.workspace

    def ingest(self, source_id: str) -> str | None:
        """Return the source's content and record INGESTED; None when the source is excluded."""
        content = self._session.source_content(source_id)
        if content is not None:
            self._record.ingested.append(source_id)
        return content

    def quarantine_of(self, source_id: str) -> int | None:
        """The incident that quarantines `source_id` in this session, if any (its ingest got None)."""
        return self._session.quarantined.get(source_id)

    def get(self, key: str, default: Any = None) -> Any:
        for write in reversed(self._record.writes):
            if write["key"] == key:
                return write["value"]
        facts = self._session.facts
        fv = facts.resolve(key, self._record.seq, self._record.id, self._record.hidden)
        self._record.reads.append(Read(key, fv.id if fv else None, fv.writer if fv else None,
                                       getattr(facts, "skipped", ())))
        value = fv.value if fv else default
        self._facts_read[key] = fv.value if fv else None
        return value

    def set(self, key: str, value: Any, *, valid_from: str | None = None, valid_until: str | None = None,
            observed_at: str | None = None) -> None:
        # Values must be JSON: they are stored, hashed and exported. Checked here, before the flush,
        # so a bad write fails its action with nothing of it in the graph.
        validation.fact_key(key)
        validation.json_value(value, field=f"fact {key!r}", max_bytes=validation.MAX_FACT_VALUE_BYTES)
        for name, clock in (("valid_from", valid_from), ("valid_until", valid_until), ("observed_at", observed_at)):
            if clock is not None:
                validation.identifier(clock, field=name, max_length=64)
        self._record.writes.append({
            "key": key, "value": value, "valid_from": valid_from, "valid_until": valid_until,
            "known_at": observed_at,
        })

    def handoff(self, agent: str, payload: dict) -> None:
        self._session.agent(agent)  # fail in the caller, not later in the walk
        validation.payload(payload, field=f"handoff to {agent}")
        self._record.handoffs.append((agent, dict(payload)))

    def effect(self, kind: str, *, amount: int = 0, ticket: str | None = None, currency: str = "USD",
               **details: Any) -> None:
        if not isinstance(amount, int):
            raise MalformedDecision("effect amounts are integer cents")
        if not isinstance(kind, str) or not NAME_PATTERN.match(kind):
            raise MalformedDecision(f"effect kind {kind!r} must match {NAME_PATTERN.pattern}")
        # Money leaves the system through these rows (the ledger, the outbox): refuse a negative or
        # absurd amount before anything is queued, not after a payment was made of it.
        validation.amount_cents(amount, field=f"{kind} amount")
        validation.currency(currency, field=f"{kind} currency")
        ticket = ticket or self._record.ticket
        if ticket is not None:
            validation.ticket_id(ticket, field=f"{kind} ticket")
        validation.json_value(details, field=f"{kind} details", max_bytes=validation.MAX_PAYLOAD_BYTES)
        self._record.effects.append({
            "kind": kind, "amount": amount, "ticket": ticket, "currency": currency, "details": details,
        })

    def contained_by(self) -> tuple[int, ...]:
        """The incidents whose containment holds this action's effects (provenance.recording.containment)."""
        return contained_view.contained_by(self._session, self._record)

    def repairing(self) -> tuple[int, ...]:
        """The incident whose repair re-runs this action, if a repair does (its effects are held)."""
        return contained_view.repairing(self._session)

    def ask(self, task: str, input: dict) -> dict:
        """A model call whose cache key covers the facts this action has read so far."""
        # The session's graph already says which server the workspace is on: its cache is there too.
        return get_client().complete(task, input, dict(self._facts_read), defer=True,
                                     workspace=self._session.workspace, server_url=self._session.graph.url)


class GraphRecorder:
    """Executes agents in one workspace graph and batches what they did into FalkorDB.

    `effects` says what happens to external effects: "live" dispatches them (ledger row, outbox email),
    "held" records them as waiting for a person's approval (repairs), "sandbox" records them in the
    graph only (the verification baseline).
    """

    def __init__(self, *, graph: Graph, workspace: str, sources: dict[str, str], effects: str = "live",
                 run_number: int = 0, excluded_sources: Iterable[str] = (), incident: int | None = None,
                 load: bool | str = True, below: float | None = None):
        assert effects in ("live", "held", "sandbox")
        self.graph = graph
        self.workspace = workspace
        self.sources = sources
        self.effects_mode = effects
        self.run_number = run_number
        self.excluded = frozenset(excluded_sources)
        # Flagged sources held out of a live recording ({source: incident}, provenance.recording.quarantine): an
        # ingest gets None, as for an excluded source, and is noted in quarantine_hits for the caller
        # to count and audit.
        self.quarantined: dict[str, int] = {}
        self.quarantine_hits: list[tuple[str, int]] = []
        # Containment (provenance.recording.containment): the actions of this session that read through one ({id:
        # incidents}), the committed versions found contained after they were read, and the effects held.
        self.tainted: dict[int, tuple[int, ...]] = {}
        self.contained_facts: dict[int, tuple[int, ...]] = {}
        self.lineage: dict[int, tuple] = {}  # a staged recording's dependencies (contained_view.note_lineage)
        self._held: list[tuple[dict, dict, tuple[int, ...]]] = []
        self.incident = incident
        self.facts = FactIndex()
        self.next_action = self.next_fact = self.next_effect = 1
        self.next_seq = 1.0
        self._pending: dict[str, list[dict]] = defaultdict(list)
        self._outgoing: list[tuple[dict, dict]] = []  # live effects to dispatch at the next flush
        self.recorded: list[int] = []
        self.ops = 0
        self._loaded_ids = (0, 0, 0)  # the highest action, fact and effect ids before this session
        self._flushed = (0, 0, 0)  # the highest of them a flush wrote (graph_debts.flushed_tops)
        self._remote: dict | None = None  # the workspace's agents in other processes, read once
        self._by_key = load == "by_key"  # read each fact key's versions when first touched, not all at once
        self._below = below  # a snapshot: only versions below this seq (a repair's walk while the desk records)
        if load:
            self._load()

    # --- state ---
    def _load(self) -> None:
        self.start_above(top_ids.max_ids(self.graph))
        if self._by_key:
            self.facts = KeyedFactIndex(self.graph, below=self._below)
        else:
            for f in self.graph.ro_query(queries.LOAD_FACTS):
                if self._below is None or f.seq < self._below:
                    self.facts.add_version(FactVersion.from_row(f))

    def start_above(self, top) -> None:
        """Number from above the graph's highest ids `top` (a rows.MaxIds), counted as loaded: what
        discard() removes is above them."""
        self._loaded_ids = (top.action or 0, top.fact or 0, top.effect or 0)
        self.number_from(*(i + 1 for i in self._loaded_ids))

    def number_from(self, action: int, fact: int, effect: int) -> None:
        """Give new actions, facts and effects ids from these on (a part of a repair walked beside others
        numbers in a range of its own)."""
        self.next_action, self.next_fact, self.next_effect = action, fact, effect
        self.next_seq = float(action)

    @property
    def next_ids(self) -> list[int]:
        return [self.next_action, self.next_fact, self.next_effect]

    def retire_fact(self, fact_id: int, *, at: str, incident: int | None) -> bool:
        """Take a fact version out of what reads resolve to (a repair undoing a write). False when it was
        not active, or is not in this session's mirror."""
        fv = self.facts.by_id.get(fact_id)
        if fv is None or not fv.active:
            return False
        fv.active = False
        fv.invalidated_at, fv.invalidated_by = at, incident
        return True

    def source_content(self, source_id: str) -> str | None:
        if source_id in self.excluded:
            return None
        incident = self.quarantined.get(source_id)
        if incident is not None:
            self.quarantine_hits.append((source_id, incident))
            return None
        try:
            return self.sources[source_id]
        except KeyError:
            raise UnknownSource(f"unknown source {source_id!r} in workspace {self.workspace!r}") from None

    def allocate_action(self) -> tuple[int, float]:
        """The next action's id and seq, in recording order."""
        aid, seq = self.next_action, self.next_seq
        self.next_action += 1
        self.next_seq = max(self.next_seq + 1.0, float(self.next_action))
        return aid, seq

    def allocate_action_id(self) -> int:
        """An id for an action whose seq the caller chooses (a repair slots new handoffs between
        recorded actions)."""
        aid = self.next_action
        self.next_action += 1
        return aid

    # --- execution ---
    def agent(self, name: str):
        """The agent called `name` here: an in-process @agent function, else one the workspace registered
        as running in another process (re-run through its replay endpoint, provenance.recording.replay). In-process
        names come first and need no database (a registration may not take one: provenance.access.onboarding);
        the registrations are read once per session, in the thread that first asks, so a replay's
        callback thread never needs a database connection."""
        if name in registered_names():
            return get_agent(name)
        if self._remote is None:
            from provenance.recording.replay import remote_agents

            self._remote = remote_agents(self.workspace)
        return self._remote.get(name) or get_agent(name)

    def execute(self, agent: str, payload: dict, *, id: int, seq: float, parent: int | None,
                hidden: tuple[float, float] | None = None) -> ActionRecord:
        """Run one agent function; nothing reaches the graph until commit()."""
        fn = self.agent(agent)
        validation.payload(payload, field=f"{agent} payload")
        record = ActionRecord(id=id, agent=agent, payload=payload, seq=seq, parent=parent,
                              ticket=payload.get("ticket"), hidden=hidden)
        decision = check_decision(agent, fn(ActionRecorder(self, record), payload))
        record.decision = decision
        record.dhash = decision_hash(decision)
        return record

    def run_root(self, agent: str, payload: dict, *, snapshot: float | None = None) -> list[int]:
        """Record one root action and, depth first, everything it hands off. Returns the action ids.

        `snapshot`: the seq its original recording's snapshot ended at (a re-execution of a root that
        was recorded beside others): the seqs from there to the root's own stay hidden from its reads."""
        ids: list[int] = []
        stack: list[tuple[str, dict, int | None]] = [(agent, payload, None)]
        hidden = None
        while stack:
            name, data, parent = stack.pop()
            aid, seq = self.allocate_action()
            if parent is None and snapshot is not None and snapshot < seq:
                hidden = (snapshot, seq)
            record = self.execute(name, data, id=aid, seq=seq, parent=parent, hidden=hidden)
            self.commit(record, status=ActionStatus.OK, root=parent is None)
            ids.append(aid)
            stack.extend((a, p, aid) for a, p in reversed(record.handoffs))
        return ids

    def commit(self, record: ActionRecord, *, status: str, root: bool, create: bool = True,
               sink: defaultdict[str, list] | None = None) -> list[dict]:
        """Queue the record's graph writes, update the fact mirror and dispatch or hold its effects.

        With create=False the Action node already exists (a repair re-run): only its new reads, writes
        and effects are queued. With a `sink` the rows go there instead of the flush queue (a repair
        stages them into its plan). Returns the effect rows created.
        """
        at = now_iso()
        pending = self._pending if sink is None else sink
        contained = contained_view.taint_of(self, record)
        if sink is not None and self.effects_mode == "live":
            contained_view.note_lineage(self, record)
        if contained:
            self.tainted[record.id] = contained
        mark = {"contained": list(contained)} if contained and self.effects_mode == "live" else {}
        if create:
            pending["actions"].append({
                "id": record.id, "agent": record.agent, "seq": record.seq, "ticket": record.ticket,
                "payload": json.dumps(record.payload, sort_keys=True),
                "decision": json.dumps(record.decision, sort_keys=True), "dhash": record.dhash,
                "status": status, "root": root, "parent": record.parent, "read_keys": record.read_keys,
                "recorded_at": at, "incident": self.incident,
                "snap": record.hidden[0] if record.hidden else None,
                "rstart": record.hidden[1] if record.hidden else None,
            } | mark)
        if record.parent is not None and create:
            pending["handoffs"].append({"parent": record.parent, "child": record.id})
        for source in record.ingested:
            pending["ingests"].append({"action": record.id, "source": source})
        for read in record.reads:
            if read.fact_id is not None:
                pending["reads"].append({"reader": record.id, "fact": read.fact_id})
                if read.writer is not None and read.writer != record.id:
                    pending["feeds"].append({"writer": read.writer, "reader": record.id})
        if len(record.writes) > 1:
            self.facts.prefetch(w["key"] for w in record.writes)  # the keys it writes in one round trip
        for write in record.writes:
            fv = FactVersion(self.next_fact, write["key"], write["value"], self.facts.next_version(write["key"]),
                             record.seq, True, record.id, write["valid_from"], write["valid_until"],
                             write["known_at"] or at, at)
            self.next_fact += 1
            self.facts.add_version(fv)
            pending["facts"].append({
                "id": fv.id, "writer": record.id, "key": fv.key, "value": json.dumps(fv.value, sort_keys=True),
                "version": fv.version, "seq": fv.seq, "valid_from": fv.valid_from, "valid_until": fv.valid_until,
                "known_at": fv.known_at, "system_at": fv.system_at,
            } | mark)
        effects = []
        for eff in record.effects:
            row = {
                "id": self.next_effect, "action": record.id, "kind": eff["kind"], "ticket": eff["ticket"],
                "amount": eff["amount"], "currency": eff["currency"],
                "details": json.dumps(eff["details"], sort_keys=True), "held": self.effects_mode == "held",
                "recorded_at": at, "incident": self.incident,
            }
            self.next_effect += 1
            pending["effects"].append(row)
            effects.append(row)
            if mark:  # read through a containment: recorded, held for its repair to settle
                row.update(held=True, incident=contained[0])
                if sink is None:
                    self._held.append((row, eff["details"], contained))
            elif self.effects_mode == "live":
                self._outgoing.append((row, eff["details"]))
        self.recorded.append(record.id)
        self.ops += 1 + len(record.reads) + len(record.writes) + len(record.handoffs) + len(record.effects)
        if sink is None and sum(len(v) for v in self._pending.values()) >= FLUSH_EVERY:
            self.flush()
        return effects

    # --- graph writes ---
    def discard(self) -> None:
        """Remove from the graph whatever this session flushed (everything above the ids it loaded), for
        a caller whose recording failed part-way: Postgres rolls its rows back, this does the graph's."""
        self._pending.clear()
        self._outgoing.clear()
        self._held.clear()
        a, f, e = self._loaded_ids
        try:
            self.graph.query(queries.DISCARD_ABOVE, {"action": a, "fact": f, "effect": e})
            self.graph.query(queries.DISCARD_ORPHAN_SOURCES)
        except GraphUnavailable:  # most likely the failure being handled (the caller raises it): owe the ranges
            graph_debts.owe(workspace=self.workspace, loaded=self._loaded_ids, flushed=self._flushed)

    def flush(self) -> None:
        """Write queued graph rows in one round trip (one query and its stamp, provenance.graph.pipelined),
        then dispatch live effects (Postgres rows in the caller's transaction, so a failed graph write
        leaves no ledger or outbox row behind)."""
        from provenance.recording.effects import dispatch_effects

        # Everything a flush writes hangs off the actions it creates (ids above every earlier flush's),
        # so it is an append for the topology mirrors, stamped with its highest action in the same script.
        top = max((r["id"] for r in self._pending.get("actions", ())), default=None)
        self._flushed = graph_debts.flushed_tops(self._pending, self._flushed)  # before the write: its answer may be lost
        pending, self._pending = self._pending, defaultdict(list)
        if any(pending.values()):
            try:
                pipelined.write(self.graph, flush_query.FLUSH, flush_query.params(pending), through_action=top)
            except BaseException:
                self.graph.mark_changed()
                raise
        get_client().flush()
        outgoing, self._outgoing = self._outgoing, []
        dispatch_effects(workspace=self.workspace, run_number=self.run_number, effects=outgoing)
        held, self._held = self._held, []
        if held:
            contained_view.hold_effects(workspace=self.workspace, run_number=self.run_number, effects=held)
