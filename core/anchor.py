"""The checkpoint log's own chain, its anchor, and the counts of the record of money and incidents.

A signed checkpoint proves a chain's head once existed; it cannot prove that the log still holds its
newest lines. So:
- each checkpoint line carries `prev`, the hash of the line before it (signed with the line), so a
  line edited, dropped from the middle or moved breaks the log's chain;
- after every append, the log's new end (its size in bytes and the hash of its last line) is signed
  and appended to the anchor, KINTSUGI_AUDIT_ANCHOR_LOG: a second append-only file in a directory of
  its own, configured apart from the log. `verify_audit` demands that the log still reaches the
  anchor's latest end with the same last line: an emptied log, or one whose newest lines were dropped
  (with or without the rows they sign), exits 1.
- each checkpoint line also carries the counts of the business tables when it was signed
  (workspaces, incidents, compensation items, ledger, outbox: the workspace's own for its chain, all
  of them for the system chain); fewer rows now than a chain's latest line counted is a deletion the
  application's role cannot make (core.db_roles), so it exits 1.

What it defends against: whoever can write the database and the checkpoint log but not the anchor's
directory (the database owner, an operator with the app's files). What it does not: someone who can
also rewrite the anchor (roll both back together), or rows removed and re-added to the same count;
and tickets are not counted (a desk re-run replaces them). Lines written before lines were chained
(no `prev`) are read as the log's first segment; they are still verified by signature.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings

GENESIS = "0" * 64
_TAIL = 65536  # more than any one line


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def _last_line(fd: int, end: int) -> bytes | None:
    start = max(0, end - _TAIL)
    data = os.pread(fd, end - start, start).rstrip(b"\n")
    if not data:
        return None
    return data.rsplit(b"\n", 1)[-1]


def log_tail(fd: int) -> tuple[str, int]:
    """(hash of the log's last line, or GENESIS for an empty log; its size in bytes)."""
    size = os.fstat(fd).st_size
    last = _last_line(fd, size)
    return (GENESIS if last is None else line_hash(last)), size


def anchor_path() -> Path:
    return Path(settings.KINTSUGI_AUDIT_ANCHOR_LOG)


def _log_name() -> str:
    return str(Path(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG).resolve())


def _signed_bytes(entry: dict) -> bytes:
    return json.dumps({k: v for k, v in entry.items() if k != "signature"}, sort_keys=True,
                      separators=(",", ":")).encode()


def record(*, head: str, size: int) -> None:
    """Append the log's new end, its size in bytes and the hash of its last line (called under the log's
    lock, after its lines are written)."""
    from core import checkpoints

    path = anchor_path()
    checkpoints._private_dir(path.parent)
    entry = {"log": _log_name(), "bytes": size, "head": head,
             "at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
             "key": checkpoints.signing_fingerprint()}
    entry["signature"] = checkpoints.sign(_signed_bytes(entry))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(entry, sort_keys=True).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _anchors(public_key) -> tuple[list[dict], list[str]]:
    """This log's anchor entries (in order) and the problems of the anchor file itself."""
    from core import checkpoints

    path, mine, problems = anchor_path(), [], []
    own_key = checkpoints.fingerprint(public_key)
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
        if entry.get("log") != _log_name():
            continue
        if entry.get("key") in ("", None, own_key) and \
                not checkpoints.signature_holds(public_key, _signed_bytes(entry), entry.get("signature", "")):
            problems.append(f"audit anchor {path}: line {number}'s signature does not verify (the anchor was edited)")
            continue
        mine.append(entry)
    return mine, problems


def check_log(public_key) -> list[str]:
    """Problems of the checkpoint log as a whole: its chain of lines, each line's signature, and its end
    against the anchor. Empty when it holds."""
    from core import checkpoints
    from core.checkpoints import Checkpoint

    log = checkpoints.log_path()
    raw = log.read_bytes() if log.exists() else b""
    problems, prev, chained = [], GENESIS, False
    own_key = checkpoints.fingerprint(public_key)
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
            prev = line_hash(line)
            continue
        if cp.prev:
            chained = True
            if cp.prev != prev:
                problems.append(f"checkpoint log {log}: line {number} does not follow the line before it "
                                f"(a line was edited, dropped or moved)")
        elif chained:
            problems.append(f"checkpoint log {log}: line {number} is not chained after chained lines")
        # A line signed by an earlier key is vouched for by the next line's prev (signed) and the anchor.
        if cp.key in ("", own_key) and not checkpoints.signature_holds(public_key, cp.signed_bytes(), cp.signature):
            problems.append(f"checkpoint log {log}: line {number}'s signature does not verify (the line was edited)")
        prev = line_hash(line)
    anchors, anchor_problems = _anchors(public_key)
    problems += anchor_problems
    if not anchors:
        if chained:
            problems.append(f"the audit anchor {anchor_path()} has no record of checkpoint log {log} "
                            f"(the anchor was removed or emptied)")
        return problems
    last = max(anchors, key=lambda e: e["bytes"])
    if len(raw) < last["bytes"]:
        problems.append(f"checkpoint log {log} holds {len(raw)} bytes but its anchor of {last['at']} recorded "
                        f"{last['bytes']}: its newest lines were removed (the log was truncated or rolled back)")
    elif last["bytes"] not in ends or line_hash(ends[last["bytes"]]) != last["head"]:
        problems.append(f"checkpoint log {log} does not hold the line its anchor of {last['at']} recorded as its "
                        f"end (the log was rewritten)")
    return problems


# --- the record of money and incidents ------------------------------------------------------------

def business_counts(*, workspace_id: int | None = None) -> dict[str, int]:
    """How many rows of the record of money and incidents there are now (committed, read outside a
    transaction): one workspace's (its chain's checkpoints carry these, so a report shows no other
    team's numbers), or every workspace's (the system chain's)."""
    from django.apps import apps

    # Named by label: the models live in the layers above core.
    Workspace, Incident = apps.get_model("provenance", "Workspace"), apps.get_model("repairs", "Incident")
    CompensationItem = apps.get_model("compensation", "CompensationItem")
    LedgerEntry, OutboxEmail = apps.get_model("provenance", "LedgerEntry"), apps.get_model("provenance", "OutboxEmail")
    tables = {"workspaces": (Workspace.objects, "pk"), "incidents": (Incident.objects, "workspace_id"),
              "compensation_items": (CompensationItem.objects, "incident__workspace_id"),
              "ledger": (LedgerEntry.objects, "workspace_id"), "outbox": (OutboxEmail.objects, "workspace_id")}
    return {name: (rows if workspace_id is None else rows.filter(**{path: workspace_id})).count()
            for name, (rows, path) in tables.items()}


def check_counts() -> list[str]:
    """Fewer rows than a chain's latest counted checkpoint says: rows were removed behind the app's back."""
    from core import checkpoints

    database, latest = checkpoints.database_name(), {}
    for cp in checkpoints.read_log():
        if cp.database == database and cp.counts and (cp.chain not in latest or cp.seq >= latest[cp.chain].seq):
            latest[cp.chain] = cp
    problems = []
    for label, cp in sorted(latest.items()):
        ws = None if label == checkpoints.SYSTEM else int(label.split(":", 1)[1])
        now = business_counts(workspace_id=ws)
        where = "in all" if ws is None else f"of workspace #{ws}"
        problems += [f"{name} {where}: {now.get(name, 0)} rows, but the checkpoint of {cp.at} counted {n}: "
                     f"{n - now.get(name, 0)} were removed behind the application's back"
                     for name, n in sorted(cp.counts.items()) if now.get(name, 0) < n]
    return problems
