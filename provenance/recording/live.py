"""Recordings of one workspace side by side: a snapshot to read, a place in the desk's order at commit.

A recording opens on a snapshot: the facts committed when it opened (every version below the seq
`snapshot`). Its agents run against that snapshot plus the recording's own earlier writes, holding no
lock, for as long as they think. Nothing reaches the graph meanwhile: the recording's actions, facts
and effects carry provisional ids. Its commit takes the workspace graph's lock for one short critical
section, numbers them after everything committed so far (ids, seqs and fact versions in commit order),
writes them in one flush and dispatches the live effects. Every action of a recording that others
committed beside stores the seqs its reads did not see, [snapshot, its first seq) (`snap`, `rstart`
on the Action node), so that every re-execution (the repair walk, the verification baseline, a
what-if) resolves its reads against the same snapshot the original read.

Two open recordings that write the same key: each read the snapshot's value; both versions are kept,
numbered in commit order, so the last committer's is the current one.

A repair that retired a fact the recording read before it committed (it read a poisoned value the
repair has already dealt with) makes the commit run the recording again on a fresh snapshot, so a
recording never lands on memory a finished repair removed.
"""
from __future__ import annotations

from collections import defaultdict

from django.db import transaction

from provenance.graph import contained_view, pipelined, queries, top_ids

from provenance.recording import quarantine
from provenance.graph.fact_index import KeyedFactIndex
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.recording.recorder import ActionRecord, Read, GraphRecorder
from provenance.vocabulary import ActionStatus

RERUNS = 5  # a recording run again this many times on fresh snapshots and still stale gives up


class StaleRecording(RuntimeError):
    """A recording whose snapshot kept being retired by repairs while it was run again."""


class _InMemoryRecorder(GraphRecorder):
    """A session that keeps what its agents did in memory, numbered provisionally, and never flushes."""

    def __init__(self, **kw):
        super().__init__(effects="sandbox", load=False, **kw)
        self.staged: list[ActionRecord] = []

    def commit(self, record: ActionRecord, *, status: str, root: bool, create: bool = True,
               sink: defaultdict[str, list] | None = None) -> list[dict]:
        self.staged.append(record)
        return super().commit(record, status=status, root=root, create=create, sink=defaultdict(list))


class SnapshotRecording:
    """One root action and its handoffs, recorded on a snapshot and committed in the desk's order."""

    def __init__(self, workspace: Workspace, *, sources: dict[str, str] | None = None):
        self.workspace = workspace
        self.graph = workspace_graph(workspace.name)
        self.sources = WorkspaceSources(workspace) if sources is None else sources
        self.root: tuple[str, dict] | None = None
        # The row the caller read says which desk run the graph holds: a desk run replacing it before the
        # commit makes the commit run the recording again (_stale), on a fresh snapshot.
        self._open(workspace.run_number)

    def _open(self, run_number: int) -> None:
        self.run_number = run_number
        self.session = _InMemoryRecorder(graph=self.graph, workspace=self.workspace.name, sources=self.sources,
                                run_number=self.run_number)
        # A flagged source stays out of every recording from the moment of its flag (provenance.recording.quarantine).
        self.session.quarantined = quarantine.held(workspace=self.workspace)
        self.session.start_above(top_ids.max_ids(self.graph))
        self.first = tuple(self.session.next_ids)
        self.snapshot = self.session.next_seq
        # (A repair applied while it runs is found at commit: _stale.)
        self.session.facts = snapshot_facts(self.graph, self.snapshot)

    def run(self, agent: str, payload: dict) -> list[int]:
        """Run the root and its handoffs against the snapshot; returns their provisional ids."""
        self.root = (agent, payload)
        return self.session.run_root(agent, payload)

    @property
    def ops(self) -> int:
        return self.session.ops

    def _stale(self, run_number: int) -> bool:
        """Whether what the recording read has changed under it, as far as Postgres says (a repair that
        retired a version it read is found by write_records, in the graph)."""
        return run_number != self.run_number or read_ended(self.session.staged)

    def commit(self, *, wait_seconds: int = 600) -> list[int]:
        """Write the recording after everything committed so far; returns its action ids. Waits for a
        repair that is applying (it holds the graph only that long) rather than failing.

        Postgres: the graph's lock and then one statement that counts the actions into the workspace's
        row and answers its run number (provenance.recording.services.workspace_lock); a stale recording
        rolls that back and runs again."""
        from provenance.recording.services import workspace_lock  # the lock's one implementation, beside its users

        for _ in range(RERUNS):
            with transaction.atomic():
                run_number = workspace_lock(self.workspace, wait_seconds=wait_seconds,
                                            add_actions=len(self.session.staged))
                ids = None if self._stale(run_number) else self._write()
                if ids is not None:
                    return ids
                transaction.set_rollback(True)  # nothing written: the count goes back with the transaction
            self._open(run_number)  # outside the lock: the agents think again on a fresh snapshot
            self.run(*self.root)
        raise StaleRecording(f"workspace {self.workspace.name!r} kept changing under this recording; record it again")

    def _write(self) -> list[int] | None:
        return write_records(graph=self.graph, workspace=self.workspace.name, run_number=self.run_number,
                             sources=self.sources, records=self.session.staged, first=self.first,
                             snapshot=self.snapshot)


def snapshot_facts(graph, snapshot: float) -> KeyedFactIndex:
    """A recording's view of memory: each key as it was at the snapshot, read when the recording first
    touches the key (what commits later is at or above the snapshot's seq), without the versions a flag
    contains (provenance.recording.containment)."""
    return KeyedFactIndex(graph, below=snapshot, contain=True)


def read_ended(records: list[ActionRecord]) -> bool:
    """Whether these records read through a containment that has ended since: the repaired facts (or the
    lifted ones) are what they should read now."""
    return contained_view.ended_since({i for rec in records for r in rec.reads for i in r.contained})


def _commit_reads(graph, base: GraphRecorder, records: list[ActionRecord], fact0: int) -> bool:
    """What the commit reads of the graph under its lock, in one round trip: the graph's highest ids (the
    recording is numbered above them), whether a repair retired a version of the snapshot the records
    read, the versions they read that a flag contained since, and the versions of the keys they write.
    Fills `base` with them; False when a read version was retired (nothing else is taken)."""
    read = sorted({r.fact_id for rec in records for r in rec.reads if r.fact_id is not None and r.fact_id < fact0})
    asked = {"top": top_ids.ask(graph)}
    if read:
        asked["retired"] = (queries.RETIRED_FACTS, {"ids": read})
        asked["marks"] = contained_view.ask_marks(read)
    heads = base.facts.ask_heads(w["key"] for record in records for w in record.writes)
    if heads is not None:
        asked["heads"] = heads
    answers = dict(zip(asked, pipelined.read(graph, asked.values())))
    if answers.get("retired"):
        return False
    base.start_above(top_ids.answer(graph, asked["top"][1], answers["top"]))
    base.contained_facts = contained_view.marks_from(answers.get("marks", ()))
    if heads is not None:
        base.facts.take_heads(heads[1], answers["heads"])
    return True


def write_records(*, graph, workspace: str, run_number: int, sources, records: list[ActionRecord],
                  first: tuple[int, int, int], snapshot: float, effect_ids: list | None = None) -> list[int] | None:
    """Number a recording's records after everything committed (under the graph's lock, which the caller
    holds) and write them in one flush; `first`: the provisional ids its actions, facts and effects were
    numbered from (facts: every own fact id is at or above first[1]); `snapshot`: the seq its reads' snapshot ended at. Returns the final action ids,
    or None with nothing written when a repair has retired a version of the snapshot they read.
    `effect_ids`, if given, receives each record's final effect ids, in the record's order.

    The graph: one round trip of reads (_commit_reads), one of the write (GraphRecorder.flush)."""
    base = GraphRecorder(graph=graph, workspace=workspace, sources=sources, effects="live",
                            run_number=run_number, load=False)
    base.facts = KeyedFactIndex(graph)
    _, fact0, _ = first
    if not _commit_reads(graph, base, records, fact0):
        return None
    df = base.next_fact - fact0
    if records and min(r.id for r in records) >= base.next_action:
        # Nothing committed over its provisional ids: they stay (an agent over HTTP was told them).
        final_id = {record.id: record.id for record in records}
    else:
        # Provisional ids need not be contiguous (recordings over HTTP open side by side and take turns);
        # the final ones are, in the order the recording opened its actions.
        final_id = {record.id: base.next_action + i for i, record in enumerate(records)}
    first_seq = float(final_id[records[0].id]) if records else base.next_seq
    # Hidden from its reads: what others committed between its snapshot and its own place.
    hidden = (snapshot, first_seq) if snapshot < float(base.next_action) else None

    def read(r: Read) -> Read:
        if r.fact_id is None or r.fact_id < fact0:
            return r  # of the snapshot: committed ids
        return Read(r.key, r.fact_id + df, final_id.get(r.writer, r.writer), r.contained)

    ids = []
    try:
        for record in records:
            aid = final_id[record.id]
            final = ActionRecord(
                id=aid, agent=record.agent, payload=record.payload, seq=float(aid),
                parent=None if record.parent is None else final_id[record.parent], ticket=record.ticket,
                reads=[read(r) for r in record.reads],
                writes=record.writes, handoffs=record.handoffs, effects=record.effects,
                ingested=record.ingested, decision=record.decision, dhash=record.dhash, hidden=hidden)
            made = base.commit(final, status=ActionStatus.OK, root=final.parent is None)
            ids.append(final.id)
            if effect_ids is not None:
                effect_ids.append([row["id"] for row in made])
        base.flush()
    except BaseException:
        base.discard()
        raise
    return ids


class WorkspaceSources(dict):
    """A workspace's sources, all read from Postgres the first time an action of the recording ingests
    one: a root that ingests nothing reads none of them."""

    def __init__(self, ws: Workspace):
        super().__init__()
        self._ws, self._read = ws, False

    def __missing__(self, source_id: str) -> str:
        if not self._read:
            self._read = True
            self.update(self._ws.sources.values_list("source_id", "content"))
            if source_id in self:
                return self[source_id]
        raise KeyError(source_id)


class LazySources(dict):
    """A workspace's sources, each read from Postgres when an action first ingests it."""

    def __init__(self, ws: Workspace):
        super().__init__()
        self._ws = ws

    def __missing__(self, source_id: str) -> str:
        content = self._ws.sources.filter(source_id=source_id).values_list("content", flat=True).first()
        if content is None:
            raise KeyError(source_id)
        self[source_id] = content
        return content
