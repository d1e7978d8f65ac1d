"""The audit record as a download: CSV that a spreadsheet never evaluates, and JSON that a browser never
renders as markup."""
from __future__ import annotations

import csv
import io
import json
from typing import Iterable

from core.audit.event import AuditEvent

EXPORT_COLUMNS = ("chain", "seq", "at", "actor", "via", "subject_type", "subject_id", "incident", "action", "from_status",
                  "to_status", "reason", "data", "hash")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def export_row(event: AuditEvent) -> dict:
    return {
        "chain": "system" if event.workspace_id is None else f"workspace:{event.workspace_id}",
        "seq": event.seq, "at": event.at.isoformat(), "actor": event.actor_name, "via": event.via,
        "subject_type": event.subject_type, "subject_id": event.subject_id, "incident": event.incident_id,
        "action": event.action, "from_status": event.from_status, "to_status": event.to_status,
        "reason": event.reason, "data": event.data, "hash": event.hash,
    }


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as the text itself: a text starting with =, +, -, @, tab or
    carriage return gets an apostrophe in front so it is never evaluated as a formula (OWASP). Nothing
    else changes: a CSV is data, and HTML entities in it would be data corrupted, not escaped (a
    browser that renders a download is told it is text/csv or a zip, not HTML)."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):  # a number, negative or not, is no formula
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = str(value)
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
