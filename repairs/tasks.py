from celery import shared_task
from django.db import OperationalError

from provenance.graph import GraphUnavailable
from repairs.services import run_repair


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, autoretry_for=(GraphUnavailable, OperationalError),
             retry_backoff=2, retry_backoff_max=60, max_retries=5)
def repair_incident(self, incident_id: int) -> str | None:
    """Run (or resume) the repair of an incident. Safe to deliver twice: the second delivery is a no-op."""
    incident = run_repair(incident_id=incident_id)
    return incident.status if incident else None
