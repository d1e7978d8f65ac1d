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
from django.db.models import F

from provenance import queries
from provenance.fact_index import FactVersion, KeyedFactIndex
from provenance.graph import workspace_graph
from provenance.models import Workspace
from provenance.recorder import ActionRecord, Read, RecordingSession
from provenance.vocabulary import ActionStatus

RERUNS = 5  # a recording run again this many times on fresh snapshots and still stale gives up


class StaleRecording(RuntimeError):
    """A recording whose snapshot kept being retired by repairs while it was run again."""


class _Staging(RecordingSession):
    """A session that keeps what its agents did in memory, numbered provisionally, and never flushes."""

    def __init__(self, **kw):
        super().__init__(effects="sandbox", load=False, **kw)
        self.staged: list[ActionRecord] = []

    def commit(self, record: ActionRecord, *, status: str, root: bool, create: bool = True,
               sink: defaultdict[str, list] | None = None) -> list[dict]:
        self.staged.append(record)
        return super().commit(record, status=status, root=root, create=create, sink=defaultdict(list))


class LiveRecording:
    """One root action and its handoffs, recorded on a snapshot and committed in the desk's order."""

    def __init__(self, workspace: Workspace, *, sources: dict[str, str] | None = None):
        self.workspace = workspace
        self.graph = workspace_graph(workspace.name)
        self.sources = dict(workspace.sources.values_list("source_id", "content")) if sources is None else sources
        self.root: tuple[str, dict] | None = None
        self._open()

    def _open(self) -> None:
        self.run_number = Workspace.objects.filter(pk=self.workspace.pk).values_list("run_number", flat=True).get()
        self.session = _Staging(graph=self.graph, workspace=self.workspace.name, sources=self.sources,
                                run_number=self.run_number)
        top = self.graph.ro_query(queries.MAX_IDS)[0]
        self.session._loaded_ids = (top.action or 0, top.fact or 0, top.effect or 0)
        self.session.number_from(*(i + 1 for i in self.session._loaded_ids))
        self.first = tuple(self.session.next_ids)
        self.snapshot = snapshot = self.session.next_seq
        # Each key's versions are read when the recording first touches it, as they were at the snapshot:
        # what commits later is at or above it. (A repair applied meanwhile is found at commit: _stale.)
        self.session.facts = KeyedFactIndex(lambda key: [
            FactVersion.from_row(f) for f in self.graph.ro_query(queries.LOAD_FACTS_OF_KEY, {"key": key})
            if f.seq < snapshot])

    def run(self, agent: str, payload: dict) -> list[int]:
        """Run the root and its handoffs against the snapshot; returns their provisional ids."""
        self.root = (agent, payload)
        return self.session.run_root(agent, payload)

    @property
    def ops(self) -> int:
        return self.session.ops

    def _stale(self) -> bool:
        if self.run_number != Workspace.objects.filter(pk=self.workspace.pk).values_list("run_number", flat=True).get():
            return True  # a desk run replaced the graph the snapshot was taken of
        read = sorted({r.fact_id for rec in self.session.staged for r in rec.reads
                       if r.fact_id is not None and r.fact_id < self.first[1]})
        return bool(read) and bool(self.graph.ro_query(queries.RETIRED_FACTS, {"ids": read}))

    def commit(self, *, wait_seconds: int = 600) -> list[int]:
        """Write the recording after everything committed so far; returns its action ids. Waits for a
        repair that is applying (it holds the graph only that long) rather than failing."""
        from provenance.services import workspace_lock  # the lock's one implementation, beside its users

        for _ in range(RERUNS):
            with transaction.atomic():
                workspace_lock(self.workspace, wait_seconds=wait_seconds)
                if not self._stale():
                    ids = self._write()
                    Workspace.objects.filter(pk=self.workspace.pk).update(action_count=F("action_count") + len(ids))
                    return ids
            self._open()  # outside the lock: the agents think again on a fresh snapshot
            self.run(*self.root)
        raise StaleRecording(f"workspace {self.workspace.name!r} kept changing under this recording; record it again")

    def _write(self) -> list[int]:
        base = RecordingSession(graph=self.graph, workspace=self.workspace.name, sources=self.sources,
                                effects="live", run_number=self.run_number, load="by_key")
        action0, fact0, _ = self.first
        da, df = base.next_action - action0, base.next_fact - fact0
        first_seq = self.session.staged[0].seq + da if self.session.staged else base.next_seq
        hidden = (self.snapshot, first_seq) if self.snapshot < first_seq else None
        ids = []
        try:
            for record in self.session.staged:
                final = ActionRecord(
                    id=record.id + da, agent=record.agent, payload=record.payload, seq=record.seq + da,
                    parent=None if record.parent is None else record.parent + da, ticket=record.ticket,
                    reads=[Read(r.key, r.fact_id + df if r.fact_id is not None and r.fact_id >= fact0 else r.fact_id,
                                r.writer + da if r.writer is not None and r.writer >= action0 else r.writer)
                           for r in record.reads],
                    writes=record.writes, handoffs=record.handoffs, effects=record.effects,
                    ingested=record.ingested, decision=record.decision, dhash=record.dhash, hidden=hidden)
                base.commit(final, status=ActionStatus.OK, root=final.parent is None)
                ids.append(final.id)
            base.next_action = max(base.next_action, (ids[-1] if ids else 0) + 1)
            base.flush()
        except BaseException:
            base.discard()
            raise
        return ids
