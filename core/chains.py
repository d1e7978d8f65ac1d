"""Reading and verifying the audit chains: one per workspace, one for the system.

A chain holds when its rows, in seq order, number 1, 2, ... without a gap, each names the previous
row's hash, each hashes to what it carries, their ids only grow, and it reaches its latest signed
checkpoint (core.checkpoints) with the same hash there. The first check catches an edited,
inserted, reordered or deleted row in the middle; the checkpoint catches a deleted end, a truncated
table and a chain rewritten from the start.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from core import checkpoints
from core.audit import GENESIS, chain_events, row_hash, workspace_id_of
from core.checkpoints import Checkpoint
from core.audit_event import AuditEvent


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


@dataclass
class ChainStatus:
    workspace_id: int | None
    name: str
    rows: int = 0
    head: Head | None = None
    checkpoint: Checkpoint | None = None
    checkpoint_signed: bool | None = None  # None: no checkpoint
    broken: ChainBreak | None = None
    unsigned_rows: int = field(default=0)  # rows after the checkpoint, not signed yet

    @property
    def label(self) -> str:
        return checkpoints.chain_label(self.workspace_id)

    @property
    def holds(self) -> bool:
        return self.broken is None

    @property
    def status(self) -> str:
        return "verified" if self.broken is None else f"broken at seq {self.broken.seq}"

    def summary(self) -> str:
        head = f"head {self.head.hash} (seq {self.head.seq})" if self.head else "no rows"
        if self.checkpoint is None:
            signed = "no checkpoint yet"
        else:
            signed = f"checkpoint seq {self.checkpoint.seq} at {self.checkpoint.at} signed"
            if self.unsigned_rows:
                signed += f", {self.unsigned_rows} newer rows not signed yet"
        return f"audit chain holds: {self.name}: {self.rows} rows, {head}; {signed}"

    def as_dict(self) -> dict:
        return {"chain": self.label, "workspace": None if self.workspace_id is None else self.name,
                "status": self.status, "rows": self.rows,
                "head": self.head._asdict() if self.head else None,
                "checkpoint": ({"seq": self.checkpoint.seq, "hash": self.checkpoint.hash, "at": self.checkpoint.at,
                                "key": self.checkpoint.key, "signed": bool(self.checkpoint_signed)}
                               if self.checkpoint else None),
                "broken": ({"seq": self.broken.seq, "id": self.broken.id, "problem": self.broken.problem}
                           if self.broken else None)}


def workspace_name(workspace_id: int | None) -> str | None:
    if workspace_id is None:
        return None
    Workspace = AuditEvent._meta.get_field("workspace").related_model  # named by label: no upward import
    return Workspace.objects.filter(pk=workspace_id).values_list("name", flat=True).first()


def chain_name(workspace_id: int | None) -> str:
    """How people name a chain: the workspace's name, `system`, or the id of a deleted workspace."""
    if workspace_id is None:
        return checkpoints.SYSTEM
    return workspace_name(workspace_id) or f"workspace #{workspace_id} (deleted)"


def head(*, workspace) -> Head | None:
    """The newest row of a chain (committed, when read outside a transaction)."""
    row = chain_events(workspace).order_by("-seq").values_list("seq", "hash").first()
    return Head(*row) if row else None


def _walk(rows: Iterable[AuditEvent], *, name: str, seq: int = 1, prev_hash: str = GENESIS,
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


def _against_checkpoint(name: str, last: Head | None, at_checkpoint: str | None, cp: Checkpoint) -> ChainBreak | None:
    end = last.seq if last else 0
    if end < cp.seq:
        return ChainBreak(name, end + 1, None, f"the chain ends at seq {end} but its checkpoint of {cp.at} signed "
                                               f"seq {cp.seq}: rows {end + 1}..{cp.seq} were deleted"
                                               f"{' (or the table truncated)' if end == 0 else ''}")
    if at_checkpoint != cp.hash:
        return ChainBreak(name, cp.seq, None, f"the row differs from the one signed in the checkpoint of {cp.at} "
                                              f"(the chain was rewritten)")
    return None


def continues(*, workspace, checkpoint: Checkpoint | None) -> ChainBreak | None:
    """Whether the chain, from its checkpoint's row on (all of it without one), still links up: what
    must hold before a newer head is signed."""
    ws, name = workspace_id_of(workspace), chain_name(workspace_id_of(workspace))
    start = checkpoint.seq if checkpoint else 1
    rows = chain_events(ws).filter(seq__gte=start).order_by("seq").iterator(chunk_size=2000)
    if checkpoint is None:
        return _walk(rows, name=name)[0]
    first = next(rows, None)
    if first is None or first.seq != checkpoint.seq or first.hash != checkpoint.hash or row_hash(first) != first.hash:
        return ChainBreak(name, checkpoint.seq, first.pk if first else None, "the signed row is missing or changed")
    return _walk(rows, name=name, seq=first.seq + 1, prev_hash=first.hash)[0]


_LOOK_UP = object()


def verify_chain(*, workspace, checkpoint=_LOOK_UP, public_key=None) -> ChainStatus:
    """Verify one chain (a Workspace, an id, or None: the system chain) row by row and against its
    latest checkpoint (looked up unless given; None: check the rows only)."""
    ws = workspace_id_of(workspace)
    name = chain_name(ws)
    if checkpoint is _LOOK_UP:
        checkpoint = checkpoints.latest().get(checkpoints.chain_label(ws))
    status = ChainStatus(workspace_id=ws, name=name, checkpoint=checkpoint)
    rows = chain_events(ws).order_by("seq").iterator(chunk_size=2000)
    broken, status.rows, status.head, at_checkpoint = _walk(rows, name=name, want_hash_at=checkpoint.seq if checkpoint else None)
    if checkpoint is not None:
        key = public_key or checkpoints.verifying_key()
        status.checkpoint_signed = checkpoints.signature_holds(key, checkpoint.signed_bytes(), checkpoint.signature)
        if broken is None and not status.checkpoint_signed:
            broken = ChainBreak(name, checkpoint.seq, None, "its checkpoint's signature does not verify "
                                                            "(the checkpoint log was edited, or signed by another key)")
        if broken is None:
            broken = _against_checkpoint(name, status.head, at_checkpoint, checkpoint)
        if status.head:
            status.unsigned_rows = max(0, status.head.seq - checkpoint.seq)
    status.broken = broken
    return status


def chains_in_use() -> list[int | None]:
    """Every chain with rows or a checkpoint: the system chain first, then workspaces by id."""
    ids = set(AuditEvent.objects.filter(workspace__isnull=False).values_list("workspace_id", flat=True).distinct())
    for label in checkpoints.latest():
        if label.startswith("workspace:"):
            ids.add(int(label.split(":", 1)[1]))
    return [None, *sorted(ids)]


def verify_all(*, workspace_ids: Iterable[int | None] | None = None, public_key=None) -> list[ChainStatus]:
    """Verify every chain in use (or the given ones)."""
    latest = checkpoints.latest()
    ids = chains_in_use() if workspace_ids is None else list(workspace_ids)
    return [verify_chain(workspace=ws, checkpoint=latest.get(checkpoints.chain_label(ws)), public_key=public_key)
            for ws in ids]


@dataclass
class VerifyOutput:
    """What `manage.py verify_audit` prints for some chains: the admin's verify page shows the same lines."""

    stdout: list[str]
    stderr: list[str]
    exit_code: int
    statuses: list[ChainStatus]

    @property
    def holds(self) -> bool:
        return self.exit_code == 0


def verify_output(statuses: list[ChainStatus]) -> VerifyOutput:
    """The command's lines for `statuses` (verify_all's result): a summary per chain that holds, the first
    broken row of each broken chain on stderr, then a line per broken chain; exit code 1 if any broke."""
    broken = [s for s in statuses if not s.holds]
    out = [s.summary() for s in statuses if s.holds]
    err = [str(s.broken) for s in broken]
    out += [f"checked {s.rows} rows of chain {s.name}; first broken row: chain={s.name} seq={s.broken.seq}"
            + (f" id={s.broken.id}" if s.broken.id is not None else "") for s in broken]
    return VerifyOutput(stdout=out, stderr=err, exit_code=1 if broken else 0, statuses=statuses)
