"""How the compensation app hears about repairs and people: cancelling on close, releasing what was
approved while a repair was verified, and the audit event for every change of workspace membership
(incident transitions are audited where they happen: repairs.lifecycle.record_transition)."""
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed
from django.dispatch import receiver

from core import audit
from core.vocabulary import AuditAction, Via
from compensation.models import CompensationItem
from compensation.services import cancel_incident_items, enqueue_execution
from provenance.membership import current_attribution
from provenance.models import Workspace
from repairs.signals import incident_closed, repair_finished


@receiver(incident_closed, dispatch_uid="compensation.cancel_for_closed_incident")
def cancel_for_closed_incident(sender, incident, actor=None, reason="", via=Via.WORKER, **kwargs) -> None:
    cancel_incident_items(incident=incident, actor=actor, reason=reason or "incident closed", via=via)


@receiver(repair_finished, dispatch_uid="compensation.execute_approved_after_repair")
def execute_approved_after_repair(sender, incident, **kwargs) -> None:
    # Items approved while the repair was verified waited for it to finish (compensation.gates); they
    # go to the workers once the repair's own transaction has committed.
    approved = list(incident.compensation_items.filter(status=CompensationItem.Status.APPROVED)
                    .values_list("pk", flat=True))
    transaction.on_commit(lambda: [enqueue_execution(pk) for pk in approved])


# Membership decides what the tenancy rule lets a person see, so every change of it is in the record's
# system chain: attributed when it came through provenance.membership, "unattributed" otherwise.
@receiver(m2m_changed, sender=Workspace.members.through, dispatch_uid="compensation.audit_membership")
def audit_membership(sender, instance, action: str, reverse: bool, model, pk_set, **kwargs) -> None:
    if action not in ("post_add", "post_remove", "pre_clear") or (action != "pre_clear" and not pk_set):
        return
    if action == "pre_clear":
        # clear() sends no pk_set afterwards: record what it is about to remove.
        pk_set = set(instance.members.values_list("pk", flat=True) if not reverse
                     else instance.workspaces.values_list("pk", flat=True))
        if not pk_set:
            return
    who = current_attribution() or {"actor": None, "via": Via.CLI,
                                    "reason": "membership changed outside kintsugi's services (unattributed)"}
    verb = AuditAction.MEMBERSHIP_ADDED if action == "post_add" else AuditAction.MEMBERSHIP_REMOVED
    pairs = ([(instance, pk) for pk in sorted(pk_set)] if not reverse
             else [(Workspace.objects.get(pk=pk), instance.pk) for pk in sorted(pk_set)])
    User = get_user_model()
    names = dict(User.objects.filter(pk__in={u for _, u in pairs}).values_list("pk", "username"))
    audit.record_many([dict(action=verb, subject_type="workspace", subject_id=ws.pk, via=who["via"],
                            actor=who["actor"], reason=who["reason"], workspace=None,
                            data={"workspace": ws.name, "user": names.get(user_pk, str(user_pk)),
                                  "user_id": user_pk})
                       for ws, user_pk in pairs])
