"""An incident's status changes and the hand-offs to workers that the job, the services and the outage
sweep share: each status change is attributed (actor, via, reason) in one transaction; a repair or a
piece of one goes to a worker through the broker, and a broker that refuses is said on the incident
(a repair) or means this worker does the piece itself (an offer)."""
from __future__ import annotations

from django.conf import settings
from django.db import transaction

from core.audit import trail
from core.broker import send
from core.vocabulary import AuditAction, IncidentStatus, Via
from repairs.models import Incident, IncidentTransition


def record_transition(*, incident_id: int, workspace_id: int, actor, via: str, from_status: str, to_status: str,
                      reason: str) -> IncidentTransition:
    """The transition row and its audit event, in the caller's transaction: every status change of an
    incident (the flag too: no from_status) leaves both."""
    row = IncidentTransition.objects.create(incident_id=incident_id, actor=actor, via=via, from_status=from_status,
                                            to_status=to_status, reason=reason)
    trail.record(action=AuditAction.of_incident(to_status, flagged=not from_status), subject_type="incident",
                 subject_id=incident_id, via=via, actor=actor, reason=reason, incident_id=incident_id,
                 workspace=workspace_id, from_status=from_status, to_status=to_status, data={"transition": row.pk})
    return row


def transition(incident: Incident, to: str, *, actor, via: str, reason: str, **fields) -> Incident:
    """Change status and record who, from where and why, in one transaction."""
    before = incident.status
    with transaction.atomic():
        # The chain's lock before the incident's row, as every audited transaction takes them: executing
        # an approved item locks the chain and then its incident's row, and a repair finishing in the
        # other order deadlocked with it.
        trail.lock_chain(incident.workspace_id)
        incident.status = to
        for name, value in fields.items():
            setattr(incident, name, value)
        incident.save()
        record_transition(incident_id=incident.pk, workspace_id=incident.workspace_id, actor=actor, via=via,
                          from_status=before, to_status=to, reason=reason)
    return incident


def enqueue_repair(incident_id: int) -> None:
    """Send the repair to a worker; when the broker is down, say so on the incident instead of losing it."""
    from repairs.tasks import repair_incident  # the tasks run the job, which calls this module

    refused = send(repair_incident, incident_id, what=f"the repair of incident {incident_id}")
    if refused is not None:
        error = f"could not enqueue the repair: {refused}"
        workspace_id = Incident.objects.values_list("workspace_id", flat=True).get(pk=incident_id)
        with transaction.atomic():
            trail.lock_chain(workspace_id)  # chain first, as in transition()
            if Incident.objects.filter(pk=incident_id, status=IncidentStatus.OPEN).update(status=IncidentStatus.BLOCKED, error=error):
                record_transition(incident_id=incident_id, actor=None, via=Via.WORKER, from_status=IncidentStatus.OPEN,
                                  to_status=IncidentStatus.BLOCKED, reason=error, workspace_id=workspace_id)


def offer_to_idle_workers(task_name: str, *args: int) -> None:
    """Offer part of the job to idle workers. Optional: if the broker refuses it, this worker does it."""
    if not settings.KINTSUGI_REPAIR_HELPERS:
        return
    from repairs import tasks  # the tasks run the job, which calls this module

    send(getattr(tasks, task_name), *args, what=f"{task_name} of incident {args[0]}", retry=False)
