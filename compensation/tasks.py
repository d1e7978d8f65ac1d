from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from compensation.delivery.connectors import TemporaryFailure
from core.vocabulary import Via
from compensation.delivery.execution import execute_approved, execute_item


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, autoretry_for=(OperationalError, TemporaryFailure),
             retry_backoff=settings.KINTSUGI_RETRY_BACKOFF_SECONDS,
             retry_backoff_max=settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS, retry_jitter=True,
             max_retries=settings.KINTSUGI_RETRY_MAX)
def execute_compensation(self, item_id: int) -> str:
    """Execute one approved compensation item. Safe to deliver twice: the idempotency key recorded at
    approval makes the second delivery send nothing."""
    return execute_item(item_id=item_id, via=Via.WORKER).status


@shared_task(acks_late=True)
def execute_waiting_compensations() -> int:
    """Sweep: execute approved items whose task never ran (schedule it, or run it after a broker outage)."""
    return execute_approved(via=Via.WORKER)


@shared_task(acks_late=True)
def notify_reviewers(incident_id: int) -> dict | None:
    """Tell the incident's reviewers that its cases are ready (compensation.notices); safe to run twice."""
    from compensation.notices import notify_reviewers as notify

    return notify(incident_id=incident_id)


@shared_task(acks_late=True, ignore_result=True)
def send_owed_notices() -> list[int]:
    """The beat schedule's sweep of review notices still owed (the broker refused their task, or the worker
    that took it died before it was sent): sends them here. Safe to run twice."""
    from compensation.notices import send_owed_notices as sweep

    return sweep()
