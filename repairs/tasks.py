"""The repair job's Celery tasks: thin, by id, safe to deliver twice (repairs.job does the work)."""
from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from core.logcontext import log_context
from provenance.graph.graph import GraphUnavailable
from repairs import job, parts
from repairs.signals import repair_planned
from repairs.models import Incident


# Outages last minutes, not seconds: back off exponentially up to a cap of a few minutes, jittered so that
# the repairs one outage blocked do not all come back at the same instant. The sweep below takes over
# once the retries are spent.
@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, autoretry_for=(GraphUnavailable, OperationalError),
             retry_backoff=settings.KINTSUGI_RETRY_BACKOFF_SECONDS,
             retry_backoff_max=settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS, retry_jitter=True,
             max_retries=settings.KINTSUGI_RETRY_MAX)
def repair_incident(self, incident_id: int) -> str | None:
    """Run (or resume) the repair of an incident. Safe to deliver twice: the second delivery is a no-op."""
    with log_context(incident=incident_id,
                     workspace=Incident.objects.filter(pk=incident_id).values_list("workspace__name", flat=True).first()):
        incident = job.run_repair(incident_id=incident_id)
    return incident.status if incident else None


@shared_task(acks_late=True, ignore_result=True)
def heal_outages_task() -> dict:
    """The beat schedule's sweep (repairs.outages): resume what an outage stopped. Safe to run twice."""
    from repairs.outages import heal_outages

    return heal_outages()._asdict()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def walk_repair_part(incident_id: int, index: int) -> bool:
    """Walk one part of a repair that is walked in parts, unless another worker has it or it is done."""
    part = Incident.objects.get(pk=incident_id).parts.filter(index=index).only("pk").first()
    return parts.walk_part(part.pk) if part is not None else False


def _repairing(incident_id: int, **filters) -> Incident | None:
    return (Incident.objects.select_related("workspace").defer("plan")
            .filter(pk=incident_id, status=Incident.Status.REPAIRING, **filters).first())


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def record_baseline_task(incident_id: int) -> bool:
    """Record a running repair's verification baseline ahead of time (and diff, if the repair is applied
    by then); a no-op once the repair is over or when another worker holds the baseline (the repairing
    worker does whatever is left itself)."""
    from repairs.verify import verify_incident

    incident = _repairing(incident_id)
    return verify_incident(incident, excluded=incident.excluded_sources(), wait=False) if incident else False


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def draft_ahead_task(incident_id: int) -> bool:
    """Prepare a running repair's compensation drafts while the repairing worker applies and verifies;
    a no-op once the repair is over or when another worker is drafting (the repairing worker then
    waits for it, or drafts itself if nobody did)."""

    incident = _repairing(incident_id, plan__isnull=False)
    if incident is None:
        return False
    return all(done for _, done in repair_planned.send(sender=Incident, incident=incident, wait=False))


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def verify_full_task(incident_id: int, actor_id: int | None, reason: str, via: str) -> dict:
    """The whole-desk replay asked for from the API or the admin (repairs.deep_check)."""
    from django.contrib.auth import get_user_model

    from repairs.deep_check import verify_full

    actor = get_user_model().objects.get(pk=actor_id) if actor_id is not None else None
    incident = Incident.objects.select_related("workspace").defer("plan").get(pk=incident_id)
    with log_context(incident=incident_id, workspace=incident.workspace.name):
        result = verify_full(incident=incident, actor=actor, reason=reason, via=via)
    return {k: result[k] for k in ("facts", "decisions", "effects")}


@shared_task(acks_late=True, ignore_result=True)
def deep_check_task() -> list:
    """The beat's deep check (KINTSUGI_DEEP_CHECK_HOUR): every workspace's latest repair, replayed whole."""
    from repairs.deep_check import deep_check

    return deep_check()
