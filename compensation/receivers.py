"""How the compensation app hears about repairs: drafting after a repair, cancelling on close, and the
audit event for every incident transition."""
from django.db.models.signals import post_save
from django.dispatch import receiver

from compensation import audit
from compensation.services import cancel_incident_items, draft_ahead, draft_compensations
from repairs.models import IncidentTransition
from repairs.signals import incident_closed, repair_finished, repair_planned


@receiver(repair_finished, dispatch_uid="compensation.draft_for_repair")
def draft_for_repair(sender, incident, **kwargs) -> int:
    """Returns the number of compensation items for invalidated effects (the incident's count)."""
    return draft_compensations(incident=incident, actor=None, reason="repair finished", via="worker")


@receiver(repair_planned, dispatch_uid="compensation.draft_for_planned_repair")
def draft_for_planned_repair(sender, incident, wait=True, **kwargs) -> bool:
    return draft_ahead(incident=incident, wait=wait)


@receiver(incident_closed, dispatch_uid="compensation.cancel_for_closed_incident")
def cancel_for_closed_incident(sender, incident, actor=None, reason="", via="worker", **kwargs) -> int:
    return cancel_incident_items(incident=incident, actor=actor, reason=reason or "incident closed", via=via)


# Every IncidentTransition row (flag, repair start, blocked, repaired, failed, retry, close) is mirrored
# into the hash-chained audit trail in the same transaction. A receiver instead of a call in
# repairs.services._transition, because repairs also creates transitions directly (flag, blocked).
@receiver(post_save, sender=IncidentTransition, dispatch_uid="compensation.audit_incident_transition")
def audit_incident_transition(sender, instance: IncidentTransition, created: bool, **kwargs) -> None:
    if not created:
        return
    action = "incident.flagged" if not instance.from_status else f"incident.{instance.to_status}"
    audit.record(action=action, subject_type="incident", subject_id=instance.incident_id, via=instance.via,
                 actor=instance.actor, reason=instance.reason, incident_id=instance.incident_id,
                 workspace=instance.incident.workspace_id,
                 from_status=instance.from_status, to_status=instance.to_status,
                 data={"transition": instance.pk})
