"""Signed checkpoints of the audit chains' heads, kept outside Postgres.

The hash chain shows an edited, reordered or missing row in the middle, but not a missing end: the
database owner can delete the newest rows, or truncate the table, and what is left still chains. So
after an audited transaction commits, the new head of each chain it touched (chain, seq, hash, time) is
signed with an Ed25519 key that is not in the database and appended as one JSON line to a log under
KINTSUGI_HOME; `verify_audit` then demands that each chain still reaches its latest checkpoint with the
same hash there.

Writes are batched: a commit marks its chains, and a timer thread signs them within
KINTSUGI_AUDIT_CHECKPOINT_DELAY seconds (one line per chain, however many commits); a process that
exits flushes what is pending (atexit, and Celery's worker_process_shutdown). A head is only signed if
its chain continues the latest checkpoint row by row, so a cut chain is never signed over. Several
processes may write the log: lines are appended under an exclusive lock, and the latest checkpoint of a
chain is the one with the highest seq, whatever the line order.

Limits: rows committed less than the delay before an outside cut are not covered yet (nor is anything a
SIGKILLed process had pending: the next checkpoint of that chain covers it). The log and the key are
only as safe as the directory they live in: keep them where the database owner cannot write.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from django.conf import settings
from django.db import connection, connections, transaction

from core.audit import anchor, chains, keys

log = logging.getLogger(__name__)


def _canonical(data: dict) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Checkpoint:
    database: str
    chain: str
    workspace: str | None  # the workspace's name when signed (a label; `chain` identifies it)
    seq: int
    hash: str
    at: str
    key: str = ""
    signature: str = ""
    # The log's own chain (core.audit.anchor): the hash of the line before this one. Lines written
    # before lines were chained carry none and are read as the log's first segment.
    prev: str = ""
    # Rows of the record of money and incidents when signed (core.audit.anchor.business_counts).
    counts: dict | None = None

    def signed_bytes(self) -> bytes:
        """What the signature covers: every field but the signature itself (an older line's absent
        fields stay absent, so its signature still holds)."""
        return _canonical({k: v for k, v in self.as_dict().items() if k != "signature"})

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not (k in ("prev", "counts") and not v)}


# --- the log ---------------------------------------------------------------------------------------

def log_path() -> Path:
    return Path(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG)


def database_name() -> str:
    """Which database's chains a checkpoint speaks of (one log may outlive, or serve, several)."""
    return connection.settings_dict["NAME"]


def read_log(path: Path | None = None) -> list[Checkpoint]:
    path = path or log_path()
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        lines = f.read().splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            found.append(Checkpoint(**json.loads(line)))
        except (ValueError, TypeError):
            # An unreadable line is kept as a checkpoint no signature can match: verify_audit reports it.
            found.append(Checkpoint(database="?", chain=f"unreadable line {number}", workspace=None, seq=0, hash="", at=""))
    return found


def latest(*, database: str | None = None, path: Path | None = None) -> dict[str, Checkpoint]:
    """The latest checkpoint of each chain of `database` (default: this one): the highest seq."""
    database = database or database_name()
    best: dict[str, Checkpoint] = {}
    for cp in read_log(path):
        if cp.database == database and (cp.chain not in best or (cp.seq, cp.at) > (best[cp.chain].seq, best[cp.chain].at)):
            best[cp.chain] = cp
    return best


def _append(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """Append the (unsigned) checkpoints under the log's exclusive lock, each chained to the line
    before it and then signed, and record the log's new head in the anchor (core.audit.anchor)."""
    path = log_path()
    keys.private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        prev, _ = anchor.log_tail(fd)
        lines, done = [], []
        for cp in checkpoints:
            chained = Checkpoint(**{**cp.as_dict(), "prev": prev, "signature": ""})
            done.append(Checkpoint(**{**chained.as_dict(), "signature": keys.sign(chained.signed_bytes())}))
            line = json.dumps(done[-1].as_dict(), sort_keys=True).encode()
            lines.append(line + b"\n")
            prev = anchor.line_hash(line)
        os.write(fd, b"".join(lines))
        os.fsync(fd)
        anchor.record(head=prev, size=os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return done


# --- signing heads ---------------------------------------------------------------------------------

def sign_heads(workspace_ids: Iterable[int | None]) -> list[Checkpoint]:
    """Sign the committed head of each chain that moved since its latest checkpoint and continues it;
    returns the new checkpoints. Outside a transaction only: inside one it would sign rows that may
    still roll back, so it signs nothing there."""
    if connection.in_atomic_block:
        return []
    database, previous = database_name(), latest()
    signed = []
    for ws in sorted(set(workspace_ids), key=lambda w: -1 if w is None else w):
        label = chains.chain_label(ws)
        head = chains.head(workspace=ws)
        cp = previous.get(label)
        if head is None or (cp is not None and (cp.seq, cp.hash) == (head.seq, head.hash)):
            continue
        broken = chains.continues(workspace=ws, checkpoint=chains.Head(cp.seq, cp.hash) if cp else None)
        if broken is not None:
            log.error("not signing audit chain %s: %s", chains.chain_name(ws), broken)
            continue
        now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        # Signed in _append, once the line it follows is known.
        signed.append(Checkpoint(database=database, chain=label, workspace=chains.workspace_name(ws), seq=head.seq,
                                 hash=head.hash, at=now, key=keys.signing_fingerprint(),
                                 counts=anchor.business_counts(workspace_id=ws)))
    return _append(signed) if signed else []


class _Pending:
    """Chains whose head moved in this process and is not signed yet, and the timer that signs them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.chains: set[int | None] = set()
        self.timer: threading.Timer | None = None
        # Held while signing: a flush waits for the timer's signing in flight, so everything committed
        # before a flush is signed when it returns (a test, a report, an exit may cut rows right after).
        self.signing = threading.Lock()

    def add(self, workspace_id: int | None) -> None:
        with self.lock:
            self.chains.add(workspace_id)
            if self.timer is None:
                self.timer = threading.Timer(settings.KINTSUGI_AUDIT_CHECKPOINT_DELAY, self._fire)
                self.timer.daemon = True
                self.timer.start()

    def _fire(self) -> None:
        try:
            self.flush()
        finally:
            connections.close_all()  # this thread's own connections; it has no other use for them

    def flush(self) -> list[Checkpoint]:
        with self.lock:
            chains, timer = self.chains, self.timer
            self.chains, self.timer = set(), None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        with self.signing:
            if not chains:
                return []
            try:
                return sign_heads(chains)
            except Exception:
                log.exception("could not sign the audit chains' heads")
                return []


_pending = _Pending()
atexit.register(_pending.flush)
# A forked worker child starts with no timer of its own (the parent's thread does not follow it).
os.register_at_fork(after_in_child=_pending.reset)


def after_commit(*, workspace_id: int | None) -> None:
    """Have this chain's head signed once the current transaction commits (batched, see the module)."""
    transaction.on_commit(lambda: _pending.add(workspace_id))


def flush() -> list[Checkpoint]:
    """Sign what this process has pending now (exit, a report, a test)."""
    return _pending.flush()
