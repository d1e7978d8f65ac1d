"""The audit trail: append-only, hash-chained events for incidents, compensation items and policies.

`record()` is called by services in the same transaction as the change it describes (Zulip's
RealmAuditLog pattern), so a rolled-back change leaves no event and a committed one always has its
event. Rows are chained: hash = sha256(prev_hash + canonical JSON of the row). Appends are serialised
with a transaction-level advisory lock, and `seq` is the previous seq + 1 under that lock, so committed
rows have no gaps (a rolled-back transaction gives its seq back) and a deleted row shows as a gap.

Limits: a deletion of the newest rows leaves a shorter chain that still verifies; compare the head
(`verify_audit` prints it) with one kept elsewhere to catch that. TRUNCATE is refused by the role
(`restrict_role`), not by a trigger.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from datetime import timezone as dt_timezone
from typing import Iterable

from django.db import connection, transaction
from django.utils import timezone

from compensation.models import AuditEvent

GENESIS = "0" * 64
_LOCK = (7173, 1)  # pg_advisory_xact_lock key for appends (7171/7172 are the repairs' locks)
HASHED_FIELDS = ("seq", "at", "actor_id", "actor_name", "via", "subject_type", "subject_id", "incident_id",
                 "action", "from_status", "to_status", "reason", "data", "prev_hash")


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


def lock_chain() -> None:
    """Take the append lock now. Services call this before locking their own rows, so every audited
    transaction takes locks in the same order (chain first) and two of them cannot deadlock."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(_LOCK))


def _event(*, seq: int, prev: str, at, action: str, workspace=None, subject_type: str, subject_id, via: str, actor=None,
           reason: str = "", incident_id: int | None = None, from_status: str = "", to_status: str = "",
           data: dict | None = None) -> AuditEvent:
    event = AuditEvent(
        seq=seq, at=at, actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else "", via=via or "", subject_type=subject_type,
        subject_id=str(subject_id if subject_id is not None else ""), incident_id=incident_id, action=action,
        from_status=from_status or "", to_status=to_status or "", reason=reason or "",
        data=json.loads(json.dumps(data or {}, sort_keys=True, default=str)), prev_hash=prev,
    )
    event.hash = row_hash(event)
    return event


def record_many(events: list[dict]) -> list[AuditEvent]:
    """Append several events (each the keyword arguments of `record`) in order, under one lock and in
    one INSERT: a repair drafting thousands of items writes its events in milliseconds, not one round
    trip each. Must run inside the transaction of the changes they record."""
    if not events:
        return []
    with transaction.atomic():
        lock_chain()
        last = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
        seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
        at, rows = timezone.now(), []
        for fields in events:
            rows.append(_event(seq=seq, prev=prev, at=at, **fields))
            seq, prev = seq + 1, rows[-1].hash
        AuditEvent.objects.bulk_create(rows, batch_size=2000)
    return rows


def record(*, action: str, subject_type: str, subject_id, via: str, actor=None, reason: str = "", workspace=None,
           incident_id: int | None = None, from_status: str = "", to_status: str = "",
           data: dict | None = None) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records."""
    return record_many([dict(action=action, subject_type=subject_type, subject_id=subject_id, via=via, actor=actor,
                             reason=reason, incident_id=incident_id, from_status=from_status, to_status=to_status,
                             data=data)])[0]


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    id: int
    problem: str

    def __str__(self) -> str:
        return f"audit chain broken at row seq={self.seq} (id={self.id}): {self.problem}"


def verify_chain(events: Iterable[AuditEvent] | None = None) -> tuple[ChainBreak | None, int, str]:
    """Walk the chain in seq order. Returns (first break or None, rows checked, head hash)."""
    rows = events if events is not None else AuditEvent.objects.order_by("seq").iterator(chunk_size=2000)
    prev_hash, expected_seq, checked = GENESIS, 1, 0
    last_id = None
    for event in rows:
        checked += 1
        if event.seq != expected_seq:
            problem = (f"expected seq {expected_seq}: rows {expected_seq}..{event.seq - 1} are missing (deleted)"
                       if event.seq > expected_seq else f"seq {event.seq} repeats or goes back (reordered)")
            return ChainBreak(event.seq, event.pk, problem), checked, prev_hash
        if event.prev_hash != prev_hash:
            return ChainBreak(event.seq, event.pk, "prev_hash does not match the previous row (a row was "
                                                   "deleted, inserted or reordered)"), checked, prev_hash
        if row_hash(event) != event.hash:
            return ChainBreak(event.seq, event.pk, "content does not match its hash (the row was edited)"), checked, prev_hash
        # Ids come from a sequence: a later row with a smaller id means rows were swapped.
        if last_id is not None and event.pk < last_id:
            return ChainBreak(event.seq, event.pk, "row id goes back (reordered)"), checked, prev_hash
        last_id = event.pk
        prev_hash, expected_seq = event.hash, expected_seq + 1
    return None, checked, prev_hash


def restrict_role(role: str) -> None:
    """Let a database role append to and read the audit table but never change it: grant SELECT and
    INSERT, revoke UPDATE, DELETE and TRUNCATE. Run the application as that (non-owner) role; the owner
    can still drop the triggers, which is what the hash chain is for."""
    table, quoted = connection.ops.quote_name(AuditEvent._meta.db_table), connection.ops.quote_name(role)
    with connection.cursor() as cur:
        cur.execute(f"GRANT SELECT, INSERT ON {table} TO {quoted}")
        cur.execute(f"REVOKE UPDATE, DELETE, TRUNCATE ON {table} FROM {quoted}")


# --- export ---

EXPORT_COLUMNS = ("seq", "at", "actor", "via", "subject_type", "subject_id", "incident", "action", "from_status",
                  "to_status", "reason", "data", "hash")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def export_row(event: AuditEvent) -> dict:
    return {
        "seq": event.seq, "at": event.at.isoformat(), "actor": event.actor_name, "via": event.via,
        "subject_type": event.subject_type, "subject_id": event.subject_id, "incident": event.incident_id,
        "action": event.action, "from_status": event.from_status, "to_status": event.to_status,
        "reason": event.reason, "data": event.data, "hash": event.hash,
    }


def _html_safe(text: str) -> str:
    # Exports are opened in browsers and spreadsheet previews too: markup never leaves unescaped.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: markup escaped, and a leading =, +, -, @ (or tab,
    carriage return) prefixed with an apostrophe so it is never evaluated as a formula (OWASP)."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = _html_safe(str(value))
    if text.startswith(_FORMULA_START):
        text = "'" + text
    return text


def export_csv(events: Iterable[AuditEvent]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(EXPORT_COLUMNS)
    for event in events:
        row = export_row(event)
        writer.writerow([csv_cell(row[c]) for c in EXPORT_COLUMNS])
    return out.getvalue()


def export_json(events: Iterable[AuditEvent]) -> str:
    """JSON with <, > and & as \\u escapes: the same data, but inert if a browser renders it."""
    text = json.dumps([export_row(e) for e in events], indent=2, sort_keys=True, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
