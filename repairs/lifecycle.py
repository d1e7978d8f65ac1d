"""An incident's status changes and the hand-offs to workers that the job, the services and the outage
sweep share: each status change is attributed (actor, via, reason) in one transaction; a repair or a
piece of one goes to a worker through the broker, and a broker that refuses is said on the incident
(a repair) or means this worker does the piece itself (an offer)."""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from repairs.models import Incident, IncidentTransition

log = logging.getLogger(__name__)
S = Incident.Status


def transition(incident: Incident, to: str, *, actor, via: str, reason: str, **fields) -> Incident:
    """Change status and record who, from where and why, in one transaction."""
    before = incident.status
    with transaction.atomic():
        incident.status = to
        for name, value in fields.items():
            setattr(incident, name, value)
        incident.save()
        IncidentTransition.objects.create(incident=incident, actor=actor, via=via, from_status=before, to_status=to,
                                          reason=reason)
    return incident


def enqueue_repair(incident_id: int) -> None:
    """Send the repair to a worker; when the broker is down, say so on the incident instead of losing it."""
    from repairs.tasks import repair_incident  # the tasks run the job, which calls this module

    try:
        repair_incident.delay(incident_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure blocks the incident with its reason
        log.warning("could not enqueue repair of incident %s: %s", incident_id, exc)
        error = f"could not enqueue the repair: {exc}"
        with transaction.atomic():
            if Incident.objects.filter(pk=incident_id, status=S.OPEN).update(status=S.BLOCKED, error=error):
                # Every status change leaves a transition (and, through it, an audit event).
                IncidentTransition.objects.create(incident_id=incident_id, via=Incident.Via.WORKER,
                                                  from_status=S.OPEN, to_status=S.BLOCKED, reason=error)


def offer_to_idle_workers(task_name: str, *args: int) -> None:
    """Offer part of the job to idle workers. Optional: if the broker refuses it, this worker does it."""
    if not settings.KINTSUGI_REPAIR_HELPERS:
        return
    from repairs import tasks  # the tasks run the job, which calls this module

    try:
        getattr(tasks, task_name).apply_async(args, retry=False)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the work is not lost, only not shared
        log.warning("incident %s: could not hand %s to another worker: %s", args[0], task_name, exc)
