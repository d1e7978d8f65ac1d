"""How the compensation app hears about repairs and people: drafting a planned repair's items (and its
`compensations` count), what a what-if's walk would draft, executing what waited for the stores after an
outage, cancelling on close, releasing what was approved while a repair was verified, and the audit event for every change of workspace membership
(incident transitions are audited where they happen: repairs.lifecycle.record_transition)."""
from collections import defaultdict

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed
from django.dispatch import receiver

from compensation import notices
from core.audit import trail
from core.vocabulary import AuditAction, Via
from compensation.drafting.drafts import compensation_count, draft_planned, draft_repair, planned_items
from compensation.delivery.execution import execute_approved
from compensation.models import CompensationItem
from compensation.review.services import cancel_incident_items, enqueue_execution
from compensation.tasks import notify_reviewers
from core.broker import send
from provenance.access.membership import current_attribution
from provenance.models import Workspace
from repairs.signals import incident_closed, repair_finished, repair_planned, stores_back, walked_without_applying


@receiver(incident_closed, dispatch_uid="compensation.cancel_for_closed_incident")
def cancel_for_closed_incident(sender, incident, actor=None, reason="", via=Via.WORKER, **kwargs) -> None:
    cancel_incident_items(incident=incident, actor=actor, reason=reason or "incident closed", via=via)


@receiver(repair_planned, dispatch_uid="compensation.draft_planned_repair")
def draft_planned_repair(sender, incident, wait, **kwargs) -> bool:
    done = draft_repair(incident=incident, wait=wait)
    if done:  # every part drafted: the repair's `compensations` count is final
        type(incident).objects.filter(pk=incident.pk).update(compensations=compensation_count(incident=incident))
        # The cases are ready for review: tell the workspace's reviewers once the drafts are committed. The
        # notice is owed since the first items committed (compensation.notices): the task gets one sweep
        # interval to send it, and a notice whose task the broker refused is the sweep's at once.
        pk = incident.pk
        notices.expect_task(pk)
        transaction.on_commit(lambda: _send_notice(pk))
    return done


def _send_notice(incident_id: int) -> None:
    if send(notify_reviewers, incident_id, what=f"the review notice of incident {incident_id}") is not None:
        notices.due_now(incident_id)


@receiver(stores_back, dispatch_uid="compensation.execute_waiting_items")
def execute_waiting_items(sender, skip_servers, approved_before, **kwargs) -> int:
    return execute_approved(via=Via.WORKER, skip_servers=skip_servers, approved_before=approved_before)


@receiver(walked_without_applying, dispatch_uid="compensation.what_drafting_would_make")
def what_drafting_would_make(sender, incident, effects, **kwargs) -> dict:
    """The items a repair with these effects would draft, drafted without writing them (a what-if)."""
    _, planned, _ = planned_items(incident=incident, effects=effects, lock=False)
    drafted = draft_planned(planned=planned, incident=incident)
    reversed_, paid = defaultdict(int), defaultdict(int)
    for d in drafted:
        if d.planned.kind == CompensationItem.Kind.REFUND_REVERSAL:
            reversed_[d.draft["currency"] or d.planned.currency] += d.draft["amount_cents"]
        elif d.planned.kind == CompensationItem.Kind.REPLACEMENT_REFUND:
            paid[d.planned.currency] += d.planned.amount_cents
    return {"compensations": sum(1 for d in drafted if d.planned.compensates),
            "amount_reversed": dict(reversed_), "amount_paid": dict(paid),
            "items": [{"kind": d.planned.kind, "ticket": d.planned.ticket, "amount_cents": d.draft["amount_cents"],
                       "currency": d.draft["currency"] or d.planned.currency, "situation": d.planned.situation,
                       "valid": not d.problems} for d in drafted]}


@receiver(repair_finished, dispatch_uid="compensation.execute_approved_after_repair")
def execute_approved_after_repair(sender, incident, **kwargs) -> None:
    # Items approved while the repair was verified waited for it to finish (compensation.delivery.gates); they
    # go to the workers once the repair's own transaction has committed.
    approved = list(incident.compensation_items.filter(status=CompensationItem.Status.APPROVED)
                    .values_list("pk", flat=True))
    transaction.on_commit(lambda: [enqueue_execution(pk) for pk in approved])


# Membership decides what the tenancy rule lets a person see, so every change of it is in the record's
# system chain: attributed when it came through provenance.access.membership, "unattributed" otherwise.
@receiver(m2m_changed, sender=Workspace.members.through, dispatch_uid="compensation.audit_membership")
def audit_membership(sender, instance, action: str, reverse: bool, model, pk_set, **kwargs) -> None:
    _audit_workspace_users(instance, action, reverse, pk_set, field="members", related="workspaces",
                           added=AuditAction.MEMBERSHIP_ADDED, removed=AuditAction.MEMBERSHIP_REMOVED)


# Who a workspace's admins may find in the members picker widens what they see of other people: audited
# the same way.
@receiver(m2m_changed, sender=Workspace.visible_users.through, dispatch_uid="compensation.audit_visible_users")
def audit_visible_users(sender, instance, action: str, reverse: bool, model, pk_set, **kwargs) -> None:
    _audit_workspace_users(instance, action, reverse, pk_set, field="visible_users", related="visible_in_workspaces",
                           added=AuditAction.VISIBILITY_ADDED, removed=AuditAction.VISIBILITY_REMOVED)


def _audit_workspace_users(instance, action: str, reverse: bool, pk_set, *, field: str, related: str,
                           added: AuditAction, removed: AuditAction) -> None:
    if action not in ("post_add", "post_remove", "pre_clear") or (action != "pre_clear" and not pk_set):
        return
    if action == "pre_clear":
        # clear() sends no pk_set afterwards: record what it is about to remove.
        pk_set = set(getattr(instance, field).values_list("pk", flat=True) if not reverse
                     else getattr(instance, related).values_list("pk", flat=True))
        if not pk_set:
            return
    who = current_attribution() or {"actor": None, "via": Via.CLI,
                                    "reason": "membership changed outside kintsugi's services (unattributed)"}
    verb = added if action == "post_add" else removed
    pairs = ([(instance, pk) for pk in sorted(pk_set)] if not reverse
             else [(Workspace.objects.get(pk=pk), instance.pk) for pk in sorted(pk_set)])
    User = get_user_model()
    names = dict(User.objects.filter(pk__in={u for _, u in pairs}).values_list("pk", "username"))
    trail.record_many([dict(action=verb, subject_type="workspace", subject_id=ws.pk, via=who["via"],
                            actor=who["actor"], reason=who["reason"], workspace=None,
                            data={"workspace": ws.name, "user": names.get(user_pk, str(user_pk)),
                                  "user_id": user_pk})
                       for ws, user_pk in pairs])
