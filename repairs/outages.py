"""Healing after an outage, with nobody at the keyboard: the sweep the Celery beat schedule runs every
KINTSUGI_SWEEP_SECONDS.

A repair that FalkorDB or Postgres stopped is `blocked` and retries with backoff; once its retries are
spent, or when the broker refused its task, only this sweep brings it back. An approved item whose task
was lost while the broker was down stays `approved` until the sweep executes it. Every step is safe to
repeat: run_repair takes the incident's advisory lock and resumes from its checkpoint, and execution is
exactly once through the idempotency key recorded at approval."""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from compensation.execution import execute_approved
from provenance.graph import GraphUnavailable, ping
from repairs.models import Incident
from repairs.job import enqueue_repair
from repairs.services import resume_orphaned_repairs

log = logging.getLogger(__name__)
S = Incident.Status


class Healed(NamedTuple):
    """What one sweep did; `graph_error` is set (and nothing was done) while FalkorDB does not answer."""
    graph_error: str | None
    unblocked: list[int]
    resumed: list[int]
    executed: int


def blocked_by_outage() -> list[int]:
    """Blocked incidents: an outage stopped them (FalkorDB or Postgres unreachable mid-repair, the broker
    refusing their task) or they wait for an overlapping repair to finish. Anything else fails a repair.
    run_repair decides again each time, so enqueueing one that must still wait records nothing."""
    return list(Incident.objects.filter(status=S.BLOCKED).order_by("pk").values_list("pk", flat=True))


def heal_outages() -> Healed:
    """Re-enqueue blocked and orphaned repairs once FalkorDB answers, and execute approved items that
    have waited longer than one sweep. Limits: a repair that still cannot reach its stores blocks again
    and waits for the next sweep."""
    try:
        ping()
    except GraphUnavailable as exc:
        log.warning("sweep: FalkorDB still unavailable, nothing resumed: %s", exc)
        return Healed(str(exc).splitlines()[0], [], [], 0)
    unblocked = blocked_by_outage()
    for pk in unblocked:
        enqueue_repair(pk)  # run_repair takes blocked incidents as they are and records the restart
    resumed = resume_orphaned_repairs()
    # A younger approval still has its own task on the way; leave it that task, not a race for the key.
    executed = execute_approved(via="worker",
                                approved_before=timezone.now() - timedelta(seconds=settings.KINTSUGI_SWEEP_SECONDS))
    if unblocked or resumed or executed:
        log.warning("sweep: unblocked %s, resumed %s, executed %s waiting items", unblocked, resumed, executed)
    return Healed(None, unblocked, resumed, executed)
