"""Healing after an outage, with nobody at the keyboard: the sweep the Celery beat schedule runs every
KINTSUGI_SWEEP_SECONDS.

A repair that FalkorDB or Postgres stopped is `blocked` and retries with backoff; once its retries are
spent, or when the broker refused its task, only this sweep brings it back. An approved item whose task
was lost while the broker was down stays `approved` until the sweep executes it. Every step is safe to
repeat: run_repair takes the incident's advisory lock and resumes from its checkpoint, and execution is
exactly once through the idempotency key recorded at approval.

With workspaces placed on several FalkorDB servers (KINTSUGI_FALKORDB_URLS), each server is asked on
its own: what lives on a server that does not answer waits for the next sweep, the rest is healed."""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from core.vocabulary import IncidentStatus
from provenance.recording.services import settle_reachable
from provenance.graph.graph import GraphUnavailable, UnknownServer, ping, placement_servers, server_url
from repairs.models import Incident
from repairs.lifecycle import enqueue_repair
from repairs.services import resume_orphaned_repairs
from repairs.signals import stores_back
from repairs.sweep_marks import record_sweep_run

log = logging.getLogger(__name__)


class Healed(NamedTuple):
    """What one sweep did. `graph_error` says which FalkorDB servers did not answer (None: all did);
    nothing of theirs was done, and nothing at all when none answered."""
    graph_error: str | None
    unblocked: list[int]
    resumed: list[int]
    executed: int
    settled: tuple[str, ...] = ()  # the workspaces whose graph was paid what failed recordings owed it


def backoff_seconds(attempts: int) -> float:
    """How long a blocked incident rests after its `attempts`-th attempt: exponential from
    KINTSUGI_RETRY_BACKOFF_SECONDS, at most KINTSUGI_RETRY_BACKOFF_MAX_SECONDS (the task's own schedule)."""
    if attempts <= 0:
        return 0.0
    return float(min(settings.KINTSUGI_RETRY_BACKOFF_SECONDS * 2 ** min(attempts - 1, 30),
                     settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS))


def blocked_by_outage(*, skip_servers: frozenset[str] = frozenset()) -> list[int]:
    """Blocked incidents whose backoff has run out, and those needing attention: an outage stopped them
    (FalkorDB or Postgres unreachable mid-repair, the broker refusing their task) or they wait for an
    overlapping repair to finish. Anything else fails a repair. run_repair decides again each time, so
    enqueueing one that must still wait records nothing. Not those of workspaces placed on
    `skip_servers` (a needing-attention incident is resumed once its server answers again)."""
    now = timezone.now()
    rows = (Incident.objects.filter(status__in=(IncidentStatus.BLOCKED, IncidentStatus.NEEDS_ATTENTION))
            .exclude(workspace__falkordb_server__in=skip_servers)
            # Applied whole and verified different from the clean run: no outage to wait out, a person looks.
            .exclude(status=IncidentStatus.NEEDS_ATTENTION, finished_at__isnull=False).order_by("pk")
            .values_list("pk", "status", "attempts", "updated_at", "replay_failures"))
    # One needing attention because its store was away is resumed at once (its server answers: it is not
    # in skip_servers); one whose remote agent was away tries that agent again on the capped backoff.
    return [pk for pk, status, attempts, updated, replay_failures in rows
            if (status == IncidentStatus.NEEDS_ATTENTION and not replay_failures)
            or (now - updated).total_seconds() >= backoff_seconds(attempts)]


def unreachable_servers() -> dict[str, str]:
    """The placement keys whose FalkorDB server does not answer, each with the reason ('' is the
    default server; keys naming the same server are asked once). Never raises for a server that is
    away: the embedded one frozen or still loading its data is named here like any other."""
    by_url: dict[str, list[str]] = {}
    down: dict[str, str] = {}
    try:
        keys = ["", *placement_servers()]
    except GraphUnavailable as exc:  # the default server is the only one and it does not answer yet
        return {"": str(exc).splitlines()[0]}
    for key in keys:
        try:
            by_url.setdefault(server_url(key), []).append(key)
        except UnknownServer:
            continue
        except GraphUnavailable as exc:  # the embedded server's port held by one that does not answer
            down[key] = str(exc).splitlines()[0]
    for keys in by_url.values():
        try:
            ping(server=keys[0])
        except GraphUnavailable as exc:
            down.update(dict.fromkeys(keys, str(exc).splitlines()[0]))
    return down


def _every_server_down(down: dict[str, str]) -> bool:
    """Whether no configured FalkorDB server answers (asking for the list may itself find the default
    server away)."""
    if not down:
        return False
    try:
        return set(down) >= {"", *placement_servers()}
    except GraphUnavailable:
        return True


def heal_outages() -> Healed:
    """Re-enqueue blocked and orphaned repairs of the workspaces whose FalkorDB server answers, and
    execute their approved items that have waited longer than one sweep. Limits: a repair that still
    cannot reach its stores blocks again and waits for the next sweep."""
    record_sweep_run()
    down = unreachable_servers()
    error = "; ".join(sorted(set(down.values()))) or None
    if _every_server_down(down):
        log.warning("sweep: FalkorDB still unavailable, nothing resumed: %s", error)
        return Healed(error, [], [], 0)
    skip = frozenset(down)
    settled = tuple(settle_reachable(skip_servers=skip))  # first: a resumed repair walks a graph without orphans
    unblocked = blocked_by_outage(skip_servers=skip)
    for pk in unblocked:
        enqueue_repair(pk)  # run_repair takes blocked incidents as they are and records the restart
    resumed = resume_orphaned_repairs(skip_servers=skip)
    # A younger approval still has its own task on the way; leave it that task, not a race for the key.
    executed = sum(n for _, n in stores_back.send(
        sender=Incident, skip_servers=skip,
        approved_before=timezone.now() - timedelta(seconds=settings.KINTSUGI_SWEEP_SECONDS)))
    if unblocked or resumed or executed or error or settled:
        log.warning("sweep: unblocked %s, resumed %s, executed %s waiting items; unreachable: %s",
                    unblocked, resumed, executed, error or "none")
    return Healed(error, unblocked, resumed, executed, settled)
