"""An approval binds the exact content approved: execution refuses an item changed after its approval
(voided, back to pending, nothing sent), and executes the unchanged one. A decision can be undone by its
author inside the undo window, during which execution waits."""
from __future__ import annotations

from datetime import timedelta

import pytest

from compensation.delivery import approval
from compensation.delivery.execution import execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from provenance.models import LedgerEntry

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status


def _reversal(incident, ticket="t05"):
    return incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id=ticket)


def _sent(item) -> int:
    return LedgerEntry.objects.filter(idempotency_key=f"compensation:{item.pk}").count()


def test_an_unchanged_approved_item_executes(canonical):
    item = approve_item(item=_reversal(canonical.incident), actor=canonical.people.reviewer, reason="ok", via="admin")
    assert item.approved_hash == approval.content_hash(item)
    assert execute_item(item_id=item.pk).status == St.EXECUTED and _sent(item) == 1


def test_an_item_changed_after_approval_is_not_executed_and_its_approval_is_void(canonical):
    item = approve_item(item=_reversal(canonical.incident), actor=canonical.people.reviewer, reason="ok", via="admin")
    # Changed behind the services' back, after the approval: $75.00 became $750.00.
    CompensationItem.objects.filter(pk=item.pk).update(amount_cents=item.amount_cents * 10)
    done = execute_item(item_id=item.pk)
    assert done.status == St.PENDING and done.decided_by is None and not done.approved_hash
    assert _sent(item) == 0
    voided = AuditEvent.objects.get(action="item.approval_voided", subject_id=str(item.pk))
    assert voided.data["approved_hash"] != voided.data["now"]


def test_a_decision_can_be_undone_inside_the_window_and_execution_waits_for_it(canonical, settings):
    settings.KINTSUGI_UNDO_SECONDS = 10
    reviewer, other = canonical.people.reviewer, canonical.people.lead_reviewer
    item = approve_item(item=_reversal(canonical.incident), actor=reviewer, reason="ok", via="admin")
    assert execute_item(item_id=item.pk).status == St.APPROVED and _sent(item) == 0  # waits for the window
    with pytest.raises(approval.UndoRefused, match="only the person"):
        approval.undo(item=item, actor=other, reason="no", via="admin")
    undone = approval.undo(item=item, actor=reviewer, reason="wrong case", via="admin")
    assert undone.status == St.PENDING and not undone.execution_key
    assert AuditEvent.objects.filter(action="item.decision_undone", subject_id=str(item.pk), actor=reviewer).exists()
    # Once the window has passed there is no undo, and execution goes ahead.
    item = approve_item(item=undone, actor=reviewer, reason="ok after all", via="admin")
    CompensationItem.objects.filter(pk=item.pk).update(decided_at=item.decided_at - timedelta(seconds=11))
    with pytest.raises(approval.UndoRefused, match="have passed"):
        approval.undo(item=item, actor=reviewer, reason="late", via="admin")
    assert execute_item(item_id=item.pk).status == St.EXECUTED and _sent(item) == 1


def test_the_case_page_offers_its_author_an_undo(canonical, settings, client):
    settings.KINTSUGI_UNDO_SECONDS = 10
    incident, reviewer = canonical.incident, canonical.people.reviewer
    item = _reversal(incident)
    decide = f"/admin/compensation/compensationitem/case-decisions/{incident.pk}/t05/"
    client.force_login(reviewer)
    client.post(decide, {"item": item.pk, "decision": "approve"})
    page = client.get(f"/admin/compensation/compensationitem/cases/{incident.pk}/t05/").content.decode()
    assert "Undo (approved)" in page
    client.post(decide, {"item": item.pk, "decision": "undo"})
    item.refresh_from_db()
    assert item.status == St.PENDING
