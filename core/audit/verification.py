"""Verifying the audit record: each chain row by row (core.audit.chains) and against its latest signed
checkpoint (core.audit.checkpoints), the checkpoint log's own chain and its anchor (core.audit.anchor),
vanished workspaces, and business rows fewer than the latest checkpoint counted. `manage.py verify_audit`
and the admin's verify page print what this finds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from core.audit import anchor, checkpoints, keys
from core.audit.chains import (ChainBreak, Head, chain_events, chain_label, chain_name, workspace_id_of, SYSTEM,
                               walk)
from core.audit.checkpoints import Checkpoint
from core.audit.event import AuditEvent


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
        return chain_label(self.workspace_id)

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


_LOOK_UP = object()


def verify_chain(*, workspace, checkpoint=_LOOK_UP, public_key=None) -> ChainStatus:
    """Verify one chain (a Workspace, an id, or None: the system chain) row by row and against its
    latest checkpoint (looked up unless given; None: check the rows only)."""
    ws = workspace_id_of(workspace)
    name = chain_name(ws)
    if checkpoint is _LOOK_UP:
        checkpoint = checkpoints.latest().get(chain_label(ws))
    status = ChainStatus(workspace_id=ws, name=name, checkpoint=checkpoint)
    rows = chain_events(ws).order_by("seq").iterator(chunk_size=2000)
    broken, status.rows, status.head, at_checkpoint = walk(rows, name=name, want_hash_at=checkpoint.seq if checkpoint else None)
    if checkpoint is not None:
        key = public_key or keys.verifying_key()
        status.checkpoint_signed = keys.signature_holds(key, checkpoint.signed_bytes(), checkpoint.signature)
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
    return [verify_chain(workspace=ws, checkpoint=latest.get(chain_label(ws)), public_key=public_key)
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


def vanished_workspaces(statuses: list[ChainStatus]) -> list[str]:
    """Chains whose workspace no longer exists: the application's role cannot delete a workspace
    (core.db_roles), so its rows were removed behind the application's back."""
    Workspace = AuditEvent._meta.get_field("workspace").related_model  # named by label: no upward import
    ids = [s.workspace_id for s in statuses if s.workspace_id is not None]
    present = set(Workspace.objects.filter(pk__in=ids).values_list("pk", flat=True))
    return [f"audit chain workspace:{ws} has {s.rows} rows but its workspace is gone (deleted behind the "
            f"application's back)" for s in statuses if (ws := s.workspace_id) is not None and ws not in present]


def record_problems(statuses: list[ChainStatus], *, public_key=None) -> list[str]:
    """What is wrong with the record beyond each chain's own rows: the checkpoint log's chain and anchor,
    vanished workspaces, and business rows fewer than the latest checkpoint counted."""
    key = public_key or keys.verifying_key()
    return check_log(key) + vanished_workspaces(statuses) + check_counts()


def verify_output(statuses: list[ChainStatus], problems: list[str] = ()) -> VerifyOutput:
    """The command's lines for `statuses` (verify_all's result) and the record's `problems`: a summary per
    chain that holds, the first broken row of each broken chain and each problem on stderr, then a line
    per broken chain; exit code 1 if any broke or any problem was found."""
    broken = [s for s in statuses if not s.holds]
    out = [s.summary() for s in statuses if s.holds]
    err = [str(s.broken) for s in broken] + [f"audit record: {p}" for p in problems]
    out += [f"checked {s.rows} rows of chain {s.name}; first broken row: chain={s.name} seq={s.broken.seq}"
            + (f" id={s.broken.id}" if s.broken.id is not None else "") for s in broken]
    return VerifyOutput(stdout=out, stderr=err, exit_code=1 if broken or problems else 0, statuses=statuses)


# --- the checkpoint log as a whole, and the counts it carries ---------------------------------------

def _anchors(public_key) -> tuple[list[dict], list[str]]:
    """This log's anchor entries (in order) and the problems of the anchor file itself."""
    path, mine, problems = anchor.anchor_path(), [], []
    own_key = keys.fingerprint(public_key)
    if not path.exists():
        return [], []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"audit anchor {path}: line {number} is unreadable")
            continue
        if entry.get("log") != anchor.log_name():
            continue
        if entry.get("key") in ("", None, own_key) and \
                not keys.signature_holds(public_key, anchor.signed_bytes(entry), entry.get("signature", "")):
            problems.append(f"audit anchor {path}: line {number}'s signature does not verify (the anchor was edited)")
            continue
        mine.append(entry)
    return mine, problems


def check_log(public_key) -> list[str]:
    """Problems of the checkpoint log as a whole: its chain of lines, each line's signature, and its end
    against the anchor. Empty when it holds."""
    log = checkpoints.log_path()
    raw = log.read_bytes() if log.exists() else b""
    problems, prev, chained = [], anchor.GENESIS, False
    own_key = keys.fingerprint(public_key)
    offset, ends = 0, {}
    for number, line in enumerate(raw.split(b"\n"), 1):
        offset += len(line) + 1
        if not line.strip():
            continue
        ends[min(offset, len(raw))] = line
        try:
            cp = Checkpoint(**json.loads(line))
        except (ValueError, TypeError):
            problems.append(f"checkpoint log {log}: line {number} is unreadable")
            prev = anchor.line_hash(line)
            continue
        if cp.prev:
            chained = True
            if cp.prev != prev:
                problems.append(f"checkpoint log {log}: line {number} does not follow the line before it "
                                f"(a line was edited, dropped or moved)")
        elif chained:
            problems.append(f"checkpoint log {log}: line {number} is not chained after chained lines")
        # A line signed by an earlier key is vouched for by the next line's prev (signed) and the anchor.
        if cp.key in ("", own_key) and not keys.signature_holds(public_key, cp.signed_bytes(), cp.signature):
            problems.append(f"checkpoint log {log}: line {number}'s signature does not verify (the line was edited)")
        prev = anchor.line_hash(line)
    anchors, anchor_problems = _anchors(public_key)
    problems += anchor_problems
    if not anchors:
        if chained:
            problems.append(f"the audit anchor {anchor.anchor_path()} has no record of checkpoint log {log} "
                            f"(the anchor was removed or emptied)")
        return problems
    last = max(anchors, key=lambda e: e["bytes"])
    if len(raw) < last["bytes"]:
        problems.append(f"checkpoint log {log} holds {len(raw)} bytes but its anchor of {last['at']} recorded "
                        f"{last['bytes']}: its newest lines were removed (the log was truncated or rolled back)")
    elif last["bytes"] not in ends or anchor.line_hash(ends[last["bytes"]]) != last["head"]:
        problems.append(f"checkpoint log {log} does not hold the line its anchor of {last['at']} recorded as its "
                        f"end (the log was rewritten)")
    return problems


def check_counts() -> list[str]:
    """Fewer rows than a chain's latest counted checkpoint says: rows were removed behind the app's back."""
    database, latest = checkpoints.database_name(), {}
    for cp in checkpoints.read_log():
        if cp.database == database and cp.counts and (cp.chain not in latest or cp.seq >= latest[cp.chain].seq):
            latest[cp.chain] = cp
    problems = []
    for label, cp in sorted(latest.items()):
        ws = None if label == SYSTEM else int(label.split(":", 1)[1])
        now = anchor.business_counts(workspace_id=ws)
        where = "in all" if ws is None else f"of workspace #{ws}"
        problems += [f"{name} {where}: {now.get(name, 0)} rows, but the checkpoint of {cp.at} counted {n}: "
                     f"{n - now.get(name, 0)} were removed behind the application's back"
                     for name, n in sorted(cp.counts.items()) if now.get(name, 0) < n]
    return problems
