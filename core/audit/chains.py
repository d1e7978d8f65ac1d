"""The audit chains: one per workspace, one for the system. How a row is hashed into its chain, how a
chain is named and read, and whether it links up row by row.

A chain holds when its rows, in seq order, number 1, 2, ... without a gap, each names the previous
row's hash, each hashes to what it carries, and their ids only grow: that catches an edited, inserted,
reordered or deleted row in the middle. Whether it still reaches its latest signed checkpoint (which
catches a deleted end, a truncated table and a chain rewritten from the start) is
core.audit.verification's question.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timezone as dt_timezone
from typing import Iterable, NamedTuple

from core.audit.event import AuditEvent

SYSTEM = "system"
GENESIS = "0" * 64
HASHED_FIELDS = ("workspace_id", "seq", "at", "actor_id", "actor_name", "via", "subject_type", "subject_id",
                 "incident_id", "action", "from_status", "to_status", "reason", "data", "prev_hash")


def workspace_id_of(workspace) -> int | None:
    """A chain's workspace id from a Workspace, an id or None (the system chain)."""
    if workspace is None:
        return None
    return int(getattr(workspace, "pk", workspace))


def _canonical(event: AuditEvent) -> str:
    values = {}
    for name in HASHED_FIELDS:
        value = getattr(event, name)
        if name == "at":
            value = value.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")
        values[name] = value
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def row_hash(event: AuditEvent) -> str:
    return hashlib.sha256((event.prev_hash + _canonical(event)).encode()).hexdigest()


def chain_label(workspace_id: int | None) -> str:
    """The chain's id in checkpoints: `system` or `workspace:<id>` (ids outlive renames)."""
    return SYSTEM if workspace_id is None else f"workspace:{workspace_id}"


def chain_events(workspace):
    """The rows of one chain (a Workspace, an id, or None: the system chain)."""
    ws = workspace_id_of(workspace)
    return AuditEvent.objects.filter(workspace__isnull=True) if ws is None else AuditEvent.objects.filter(workspace_id=ws)


class Head(NamedTuple):
    seq: int
    hash: str


@dataclass(frozen=True)
class ChainBreak:
    chain: str  # the chain's name: a workspace's name, or "system"
    seq: int
    id: int | None
    problem: str

    def __str__(self) -> str:
        row = f" (id={self.id})" if self.id is not None else ""
        return f"audit chain {self.chain} broken at row seq={self.seq}{row}: {self.problem}"


def workspace_name(workspace_id: int | None) -> str | None:
    if workspace_id is None:
        return None
    Workspace = AuditEvent._meta.get_field("workspace").related_model  # named by label: no upward import
    return Workspace.objects.filter(pk=workspace_id).values_list("name", flat=True).first()


def chain_name(workspace_id: int | None) -> str:
    """How people name a chain: the workspace's name, `system`, or the id of a deleted workspace."""
    if workspace_id is None:
        return SYSTEM
    return workspace_name(workspace_id) or f"workspace #{workspace_id} (deleted)"


def head(*, workspace) -> Head | None:
    """The newest row of a chain (committed, when read outside a transaction)."""
    row = chain_events(workspace).order_by("-seq").values_list("seq", "hash").first()
    return Head(*row) if row else None


def walk(rows: Iterable[AuditEvent], *, name: str, seq: int = 1, prev_hash: str = GENESIS,
          want_hash_at: int | None = None):
    """Check rows in seq order from `seq` / `prev_hash`. Returns (first break, rows checked, head,
    hash of the row at `want_hash_at`)."""
    checked, last_id, last, wanted = 0, None, None, None
    for event in rows:
        checked += 1
        if event.seq != seq:
            problem = (f"expected seq {seq}: rows {seq}..{event.seq - 1} are missing (deleted)"
                       if event.seq > seq else f"seq {event.seq} repeats or goes back (reordered)")
            return ChainBreak(name, event.seq, event.pk, problem), checked, last, wanted
        if event.prev_hash != prev_hash:
            return ChainBreak(name, event.seq, event.pk, "prev_hash does not match the previous row (a row was "
                                                         "deleted, inserted or reordered)"), checked, last, wanted
        if row_hash(event) != event.hash:
            return ChainBreak(name, event.seq, event.pk, "content does not match its hash (the row was edited)"), checked, last, wanted
        # Ids come from a sequence and a chain's appends are serialised: a smaller id later means rows were swapped.
        if last_id is not None and event.pk < last_id:
            return ChainBreak(name, event.seq, event.pk, "row id goes back (reordered)"), checked, last, wanted
        if event.seq == want_hash_at:
            wanted = event.hash
        last_id, last = event.pk, Head(event.seq, event.hash)
        prev_hash, seq = event.hash, seq + 1
    return None, checked, last, wanted


def continues(*, workspace, checkpoint: Head | None) -> ChainBreak | None:
    """Whether the chain, from its signed head (`checkpoint`: the seq and hash its latest checkpoint signed)
    on, or all of it without one, still links up: what must hold before a newer head is signed."""
    ws, name = workspace_id_of(workspace), chain_name(workspace_id_of(workspace))
    start = checkpoint.seq if checkpoint else 1
    rows = chain_events(ws).filter(seq__gte=start).order_by("seq").iterator(chunk_size=2000)
    if checkpoint is None:
        return walk(rows, name=name)[0]
    first = next(rows, None)
    if first is None or first.seq != checkpoint.seq or first.hash != checkpoint.hash or row_hash(first) != first.hash:
        return ChainBreak(name, checkpoint.seq, first.pk if first else None, "the signed row is missing or changed")
    return walk(rows, name=name, seq=first.seq + 1, prev_hash=first.hash)[0]
