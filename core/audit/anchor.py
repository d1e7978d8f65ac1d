"""The checkpoint log's own chain, its anchor, and the counts of the record of money and incidents
(what is written; core.audit.verification checks them).

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

from django.apps import apps
from django.conf import settings

from core.audit import keys

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


def log_name() -> str:
    return str(Path(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG).resolve())


def signed_bytes(entry: dict) -> bytes:
    return json.dumps({k: v for k, v in entry.items() if k != "signature"}, sort_keys=True,
                      separators=(",", ":")).encode()


def record(*, head: str, size: int) -> None:
    """Append the log's new end, its size in bytes and the hash of its last line (called under the log's
    lock, after its lines are written)."""
    path = anchor_path()
    keys.private_dir(path.parent)
    entry = {"log": log_name(), "bytes": size, "head": head,
             "at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
             "key": keys.signing_fingerprint()}
    entry["signature"] = keys.sign(signed_bytes(entry))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(entry, sort_keys=True).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the record of money and incidents ------------------------------------------------------------

def business_counts(*, workspace_id: int | None = None) -> dict[str, int]:
    """How many rows of the record of money and incidents there are now (committed, read outside a
    transaction): one workspace's (its chain's checkpoints carry these, so a report shows no other
    team's numbers), or every workspace's (the system chain's)."""
    # Named by label: the models live in the layers above core.
    Workspace, Incident = apps.get_model("provenance", "Workspace"), apps.get_model("repairs", "Incident")
    CompensationItem = apps.get_model("compensation", "CompensationItem")
    LedgerEntry, OutboxEmail = apps.get_model("provenance", "LedgerEntry"), apps.get_model("provenance", "OutboxEmail")
    tables = {"workspaces": (Workspace.objects, "pk"), "incidents": (Incident.objects, "workspace_id"),
              "compensation_items": (CompensationItem.objects, "incident__workspace_id"),
              "ledger": (LedgerEntry.objects, "workspace_id"), "outbox": (OutboxEmail.objects, "workspace_id")}
    return {name: (rows if workspace_id is None else rows.filter(**{path: workspace_id})).count()
            for name, (rows, path) in tables.items()}
