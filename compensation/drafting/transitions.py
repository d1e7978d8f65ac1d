"""One status change of a compensation item, with its audit event in the same transaction: shared by
drafting (cancelling superseded drafts) and review (decisions)."""
from __future__ import annotations

from core.audit import trail
from compensation.models import CompensationItem


def set_status(item: CompensationItem, to: str, *, actor, via: str, action: str, reason: str, data: dict | None = None,
                **fields) -> CompensationItem:
    before = item.status
    item.status = to
    for name, value in fields.items():
        setattr(item, name, value)
    item.save()
    trail.record(action=action, subject_type="compensation_item", subject_id=item.pk, via=via, actor=actor,
                 reason=reason, incident_id=item.incident_id, from_status=before, to_status=to, data=data or {},
                 workspace=item.incident.workspace_id)
    return item
