"""What an approval binds, and the short window in which a decision can be taken back.

An approval stores the SHA-256 of the item's content as approved (who it goes to, what it says, what
it moves). Execution recomputes it: an item changed after its approval, by any path, is not executed;
its approval is void and it goes back to the reviewers (compensation.delivery.execution).

A decision can be undone by the person who made it for `KINTSUGI_UNDO_SECONDS` after it; execution
waits for that window to pass, so an undone approval has sent nothing.
"""
from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compensation.delivery import grouped_messages
from core.audit import trail
from core.vocabulary import AuditAction
from compensation.models import CompensationItem

St = CompensationItem.Status
BOUND_FIELDS = ("kind", "ticket_id", "customer_email", "to", "subject", "body", "payment_reference", "amount_cents",
                "currency")


class ApprovalVoid(ValueError):
    """The item's content is not what was approved."""


class UndoRefused(ValueError):
    pass


def content_hash(item: CompensationItem) -> str:
    """SHA-256 of the fields an approval binds, canonical JSON."""
    values = {name: getattr(item, name) for name in BOUND_FIELDS}
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode()).hexdigest()


def matches_approval(item: CompensationItem) -> bool:
    return bool(item.approved_hash) and item.approved_hash == content_hash(item)


def undo_seconds() -> int:
    return int(getattr(settings, "KINTSUGI_UNDO_SECONDS", 0) or 0)


def undo_ends(item: CompensationItem):
    """When the window to undo `item`'s decision closes (None: no window, or not decided)."""
    if item.decided_at is None or not undo_seconds():
        return None
    return item.decided_at + timedelta(seconds=undo_seconds())


def in_undo_window(item: CompensationItem) -> bool:
    ends = undo_ends(item)
    return ends is not None and timezone.now() < ends


def void(item: CompensationItem, *, via: str, actor=None) -> CompensationItem:
    """Put an approved item whose content changed back to pending (locked by the caller), audited."""
    before, approved = item.status, item.approved_hash
    item.status, item.approved_hash, item.execution_key = St.PENDING, "", None
    item.decided_by, item.decided_at = None, None
    item.save(update_fields=["status", "approved_hash", "execution_key", "decided_by", "decided_at", "updated_at"])
    trail.record(action=AuditAction.ITEM_APPROVAL_VOIDED, subject_type="compensation_item", subject_id=item.pk, via=via,
                 actor=actor, reason="the item changed after it was approved: it needs a new decision",
                 incident_id=item.incident_id, workspace=item.incident.workspace_id, from_status=before,
                 to_status=St.PENDING, data={"approved_hash": approved, "now": content_hash(item)})
    return item


def undo(*, item: CompensationItem, actor, reason: str, via: str) -> CompensationItem:
    """Take back `actor`'s own decision on `item` within the undo window: it is pending again."""
    with transaction.atomic():
        trail.lock_chain(item.incident.workspace_id)
        item = CompensationItem.objects.select_for_update().select_related("incident").get(pk=item.pk)
        if item.status not in (St.APPROVED, St.REJECTED):
            raise UndoRefused(f"item #{item.pk} is {item.status}: there is no decision to undo")
        if item.decided_by_id != getattr(actor, "pk", None):
            raise UndoRefused("only the person who decided an item can undo the decision")
        if not in_undo_window(item):
            raise UndoRefused(f"the {undo_seconds()} s to undo the decision on item #{item.pk} have passed")
        before = item.status
        item.status, item.approved_hash, item.execution_key = St.PENDING, "", None
        item.decided_by, item.decided_at, item.decision_reason = None, None, ""
        item.save()
        trail.record(action=AuditAction.ITEM_DECISION_UNDONE, subject_type="compensation_item", subject_id=item.pk, via=via,
                     actor=actor, reason=reason or "undone", incident_id=item.incident_id,
                     workspace=item.incident.workspace_id, from_status=before, to_status=St.PENDING)
        if before == St.REJECTED:
            # A customer's grouped message said this money would not move: it may again now.
            grouped_messages.rewrite_for(item, actor=actor, via=via,
                                         reason=f"the rejection of item #{item.pk} was undone: the customer's "
                                                f"message says again what its ticket's money does")
    return item


def undo_decisions(*, items: list[CompensationItem], actor, reason: str,
                   via: str) -> tuple[list[CompensationItem], list[tuple[CompensationItem, str]]]:
    """Undo each of `items` (a case's or a bulk confirmation's) in its own transaction, emails before the
    money they explain (the reverse of the order they leave in). Returns those undone and those refused."""
    undone, refused = [], []
    for item in sorted(items, key=lambda i: (i.moves_money, i.pk)):
        try:
            undone.append(undo(item=item, actor=actor, reason=reason, via=via))
        except (PermissionError, ValueError) as exc:
            refused.append((item, str(exc)))
    return undone, refused
