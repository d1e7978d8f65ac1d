"""What a reviewer's edit changed: the draft as it was drafted against what they approved, field by
field, with the words removed and added marked (difflib over words and the spaces between them).

Read from the `item.edited` audit events (compensation.review.services records each edit's before and after
there, in the approval's transaction), so the diff is the record's, not a copy kept beside it. Several
edits of one field show the first draft against the last text."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from compensation.models import AuditEvent, CompensationItem
from core.money import format_money
from core.vocabulary import AuditAction

LABELS = {"to": "To", "subject": "Subject", "body": "Text", "amount_cents": "Amount"}


@dataclass
class FieldEdit:
    field: str
    label: str
    before: str
    after: str
    pieces: list[tuple[str, str]] = field(default_factory=list)  # ("same" | "removed" | "added", text)

    def as_dict(self) -> dict:
        return {"field": self.field, "before": self.before, "after": self.after}


def _pieces(before: str, after: str) -> list[tuple[str, str]]:
    a, b = re.split(r"(\s+)", before), re.split(r"(\s+)", after)
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("removed", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("added", "".join(b[j1:j2])))
    return [p for p in out if p[1]]


def _text(name: str, value, currency: str) -> str:
    if name == "amount_cents" and isinstance(value, int) and not isinstance(value, bool):
        return format_money(value, currency)
    return "" if value is None else str(value)


def edit_diffs(items) -> dict[int, list[FieldEdit]]:
    """{item id: its field edits} for the edited ones among `items`, in one query."""
    edited = {str(i.pk): i for i in items if i.edited}
    if not edited:
        return {}
    spans: dict[str, dict[str, list]] = {}
    for event in (AuditEvent.objects.filter(subject_type="compensation_item", subject_id__in=list(edited),
                                            action=AuditAction.ITEM_EDITED).order_by("seq")):
        for name, change in (event.data.get("changes") or {}).items():
            span = spans.setdefault(event.subject_id, {}).setdefault(name, [change.get("before"), None])
            span[1] = change.get("after")
    out: dict[int, list[FieldEdit]] = {}
    for pk, fields in spans.items():
        item: CompensationItem = edited[pk]
        rows = []
        for name in sorted(fields, key=lambda n: list(LABELS).index(n) if n in LABELS else 99):
            before, after = (_text(name, v, item.currency) for v in fields[name])
            rows.append(FieldEdit(name, LABELS.get(name, name), before, after,
                                  [("removed", before), ("added", after)] if name == "amount_cents"
                                  else _pieces(before, after)))
        out[item.pk] = rows
    return out
