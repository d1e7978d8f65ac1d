"""Executing approved items, exactly once.

The idempotency key (`compensation:<item id>`) is recorded with the approval, before anything is sent.
Execution then runs in three steps:
1. lock the item; an executed item is a no-op, anything but an approved item is refused, an item of a
   repair not yet verified 0 / 0 / 0 (compensation.delivery.gates) and an email still waiting for the money item
   it explains (compensation.delivery.sequencing) are left for later; count the attempt;
2. deliver, carrying the key, through the connector the workspace chose for the item's kind
   (compensation.delivery.deliveries: Stripe, SMTP, a signed webhook, the team's agent, or the demo's sandbox
   ledger, outbox and manual record: compensation.delivery.connectors); each connector is safe to repeat with
   the key, and adds to the `item.executed` row what it alone knows (the manual record: what a person did);
   an item still in its undo window waits (an email also while the approval of the money item it explains
   may still be undone), and one whose content no longer matches the hash stored at
   its approval is not executed: the approval is void and the item is pending again
   (compensation.delivery.approval);
3. lock the item again and mark it executed (once: a concurrent or repeated run finds it executed).
A retry, a double click or a worker that dies between 2 and 3 repeats step 2 with the same key and
sends nothing twice (Stripe and the webhook honour the key; SMTP, which cannot, is marked `uncertain`
for a person instead of being repeated: compensation.delivery.deliveries).
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from compensation.delivery import approval, deliveries, gates, grouped_messages, sequencing
from compensation.delivery.connectors import TemporaryFailure, connector
from core.audit import trail
from core.vocabulary import AuditAction, Via
from compensation.models import CompensationItem

K, St = CompensationItem.Kind, CompensationItem.Status


class NotApproved(ValueError):
    pass


def _locked(item_id: int) -> CompensationItem:
    # The item's row alone: a reviewer's decision locks the incident's row with its money item and then the
    # emails that explain it (compensation.review.services), so an execution holding an email and waiting
    # for the incident's row deadlocked with the rejection of that email's money item.
    return CompensationItem.objects.select_for_update(of=("self",)).select_related("incident__workspace").get(pk=item_id)


def execute_item(*, item_id: int, via: str = Via.WORKER, actor=None) -> CompensationItem:
    """Execute an approved item exactly once (see the module docstring). Returns the item."""
    with transaction.atomic():
        item = _locked(item_id)
        if item.status == St.EXECUTED:
            return item
        if item.status != St.APPROVED:
            raise NotApproved(f"item #{item.pk} is {item.status}; only approved items are executed")
        if gates.execution_wait(item.incident) is not None:
            # Approved while the repair was being verified: the job enqueues it once verified clean.
            return item
        if approval.in_undo_window(item):
            # The approver may still take it back: enqueued again with the window as its countdown.
            return item
        outdated = not approval.matches_approval(item) or grouped_messages.stale(item)
        if not outdated and sequencing.waits_for(item) is not None:
            # An email that explains a money item still undecided: approving that item enqueues it again.
            return item
        if not outdated and _undoable(item) is not None:
            # And one whose money item's approval may still be taken back: the approval enqueued the email
            # with the undo window as its countdown, so it comes again once the window has closed.
            return item
        if not outdated:
            item.execution_attempts += 1
            item.save(update_fields=["execution_attempts", "updated_at"])
    if outdated:
        return _put_right(item_id=item_id, via=via, actor=actor)
    sent = deliveries.send(item)  # TemporaryFailure propagates: the task retries with backoff
    if sent is None:
        return item  # failed, dead or uncertain (a person decides), or awaiting the team's agent: still approved
    name = item.delivery.connector
    outcome = {"delivery": sent.state, "connector": name, "reference": sent.reference, **connector(name).executed(item)}
    with transaction.atomic():
        trail.lock_chain(item.incident.workspace_id)
        item = _locked(item_id)
        if item.status == St.EXECUTED:
            return item
        item.status, item.executed_at = St.EXECUTED, timezone.now()
        item.save(update_fields=["status", "executed_at", "updated_at"])
        trail.record(action=AuditAction.ITEM_EXECUTED, subject_type="compensation_item", subject_id=item.pk, via=via,
                     actor=actor, reason="approved item executed", incident_id=item.incident_id,
                     workspace=item.incident.workspace_id,
                     from_status=St.APPROVED, to_status=St.EXECUTED,
                     data={"idempotency_key": item.execution_key, "attempts": item.execution_attempts, **outcome})
    return item


def _undoable(item: CompensationItem) -> CompensationItem | None:
    """An approved money item `item` (an email) explains whose approval can still be undone: sent now, the
    email would announce money that an undo and a rejection then keep from moving."""
    return next((m for m in sequencing.explained_items(item) if m.status == St.APPROVED and approval.in_undo_window(m)),
                None)


def _put_right(*, item_id: int, via: str, actor) -> CompensationItem:
    """An approved item that must not leave as it is: changed after its approval (the approval is void:
    what would leave is not what a person approved), or a customer's message about several tickets whose
    money was decided otherwise since (written again and reopened, never sent in the older words). Both
    are audited, so the workspace's chain is locked before the item, in the order every audited
    transaction takes them: taken while holding the item, it waited for a reviewer who held the chain
    and waited for the item."""
    workspace_id = CompensationItem.objects.filter(pk=item_id).values_list("incident__workspace_id", flat=True).get()
    with transaction.atomic():
        trail.lock_chain(workspace_id)
        item = _locked(item_id)
        if item.status != St.APPROVED or item.executed_at is not None:
            return item  # decided again meanwhile (a rejection rewrites and reopens it itself)
        if not approval.matches_approval(item):
            approval.void(item, via=via, actor=actor)
        elif grouped_messages.stale(item):
            grouped_messages.rewrite(item, via=via, actor=actor,
                                     reason="a money item it explains was decided since: written again before sending")
        return item


def execute_approved(*, via: str = Via.WORKER, actor=None, approved_before=None,
                     skip_servers: frozenset[str] = frozenset()) -> int:
    """Execute every approved item still waiting (e.g. its task was lost while the broker was down);
    with `approved_before`, only those approved (last changed) before then; not those of workspaces
    placed on `skip_servers`. Returns how many were executed (emails held for their money item stay
    approved)."""
    done = 0
    waiting = deliveries.due(CompensationItem.objects.filter(status=St.APPROVED).exclude(
        incident__workspace__falkordb_server__in=skip_servers))
    if approved_before is not None:
        waiting = waiting.filter(updated_at__lt=approved_before)
    for pk in waiting.order_by("pk").values_list("pk", flat=True):
        try:
            done += execute_item(item_id=pk, via=via, actor=actor).status == St.EXECUTED
        except TemporaryFailure:
            continue  # its delivery waits for its next try; the others go on

    return done
