"""The repair job: from a flagged source to a repaired, verified incident with its items drafted.

`repair()` reads as the job's steps; each is a function below it. Every step checkpoints in Postgres
before the next starts, so a worker killed anywhere resumes at the step it was in:

1. scope     fix which sources the repair leaves out (its own and those of repairs already applied);
2. walk      find the blast radius, mask the actions that ingested the source and walk the rest in
             seq order, re-running an action only when something upstream of it changed
             (repairs.engine; split into parts that several workers walk at once when it is large:
             repairs.parts);
3. plan      checkpoint the walk's plan, outcomes and effects (nothing reached the graph before);
4. apply     apply the plan's steps to the graph, each idempotent, counting them as they land;
5. draft     turn what already left the building into review items (compensation.drafts), which
             reviewers may decide from here on, and
6. verify    re-execute the desk without the flagged sources and diff (repairs.verify), which
             execution waits for; both offered to idle workers as soon as they can start;
7. finish    mark the incident repaired and wake the repairs that waited for this one.

run_repair() takes the locks that make the job safe to deliver twice and turns an outage into a
blocked incident (the task retries) and anything else into a failed one.
"""
from __future__ import annotations

import logging
import time

import redis

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from compensation.drafts import compensation_count, draft_repair
from kintsugi_site import locks
from kintsugi_site.bulk import copy_rows
from kintsugi_site.locks import advisory_lock
from provenance import queries
from provenance.graph import Graph, GraphUnavailable, workspace_graph
from provenance.llm import get_client
from provenance.models import Workspace
from provenance.scrub import scrub_secrets
from provenance.vocabulary import ActionStatus
from repairs import parts
from repairs.engine import compute_plan, repair_session
from repairs.faults import fault_point
from repairs.models import ActionOutcome, Incident, IncidentTransition, RepairEffect, RepairStep
from repairs.steps import apply_step
from repairs.signals import repair_finished
from repairs.verify import verify_incident

log = logging.getLogger(__name__)
S, P = Incident.Status, Incident.Phase
WAITING_FOR = "waiting for incident #"  # how a blocked incident's error starts when it waits for another


def run_repair(*, incident_id: int) -> Incident | None:
    """Repair the workspace after a flag. Safe to call twice at once (the second returns None) and
    after a crash at any point (it resumes from the checkpoint). Raises GraphUnavailable after marking
    the incident blocked, so the task can retry."""
    with advisory_lock(locks.REPAIR, incident_id, wait=False) as mine:
        if not mine:
            return None
        incident = Incident.objects.select_related("workspace").get(pk=incident_id)
        if incident.status not in Incident.REPAIRABLE:
            return incident
        # Repairs of one workspace run one at a time, so overlapping incidents see each other's result.
        with advisory_lock(locks.WORKSPACE_GRAPH, incident.workspace_id, wait=True):
            incident.refresh_from_db()
            if incident.status not in Incident.REPAIRABLE:
                return incident
            unfinished = _half_applied_overlap(incident)
            if unfinished is not None:
                return _wait_for(incident, unfinished)
            try:
                if incident.status != S.REPAIRING:
                    transition(incident, S.REPAIRING, actor=None, via=Incident.Via.WORKER, reason="repair started",
                               attempts=incident.attempts + 1, started_at=incident.started_at or timezone.now(),
                               error="")
                return repair(incident)
            except (GraphUnavailable, OperationalError, redis.exceptions.ConnectionError,
                    redis.exceptions.TimeoutError) as exc:
                if not outage(exc):
                    return _failed(incident, exc)
                incident.refresh_from_db()
                message = blocked_reason(exc)
                if incident.attempts >= settings.KINTSUGI_INCIDENT_MAX_ATTEMPTS:
                    message = f"needs attention after {incident.attempts} attempts: {message}"
                    transition(incident, S.NEEDS_ATTENTION, actor=None, via=Incident.Via.WORKER, reason=message,
                               error=message)
                    return incident  # no more task retries: the sweep resumes it once the store answers
                transition(incident, S.BLOCKED, actor=None, via=Incident.Via.WORKER, reason=message, error=message)
                if isinstance(exc, redis.exceptions.RedisError):
                    raise GraphUnavailable(message) from exc  # the task retries outages by this type
                raise
            except Exception as exc:
                return _failed(incident, exc)


def blocked_reason(exc: Exception) -> str:
    """What a blocked incident says: which store is away, then the error's first line."""
    text = scrub_secrets(str(exc).splitlines()[0]) if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OperationalError):
        return f"Postgres unreachable: {text}"
    if isinstance(exc, redis.exceptions.RedisError):
        return f"FalkorDB unreachable: {type(exc).__name__}: {text}"
    return text


def outage(exc: Exception) -> bool:
    """Whether an error is a store being away (retry later) rather than one retrying cannot mend: every
    GraphUnavailable, and the Postgres errors of a lost or refused connection (no SQLSTATE, class 08),
    an operator's shutdown (57) or exhausted resources (53). A limit the data exceeds (54, say a jsonb
    value over 256 MB) fails the repair instead of blocking it for ever."""
    if isinstance(exc, (GraphUnavailable, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return True  # FalkorDB refused, reset or went silent past its timeout (a frozen server)
    state = getattr(exc.__cause__, "sqlstate", None)
    return state is None or state[:2] in ("08", "53", "57")


def _failed(incident: Incident, exc: Exception) -> Incident:
    log.exception("repair of incident %s failed", incident.pk)
    incident.refresh_from_db()
    return transition(incident, S.FAILED, actor=None, via=Incident.Via.WORKER, reason="repair failed",
                      error=scrub_secrets(f"{type(exc).__name__}: {exc}"))


def repair(incident: Incident) -> Incident:
    """The job's steps, resumed from wherever the last attempt checkpointed."""
    graph = workspace_graph(incident.workspace.name)
    if incident.plan is None:
        excluded = scope(incident)
        plan = walk(incident, graph, excluded)
        checkpoint_plan(incident, plan)
    apply_plan(incident, graph)
    verify_and_draft(incident)
    return finish(incident)


# --- 1. scope ---
def scope(incident: Incident) -> set[str]:
    """Fix what the repair leaves out as its walk starts (under the workspace lock, so no other repair
    of the workspace finishes meanwhile); the walk, its parts and the verification all use it."""
    excluded = _excluded_now(incident)
    incident.excluded = sorted(excluded)
    Incident.objects.filter(pk=incident.pk).update(excluded=incident.excluded, baseline_for=None, verification=None)
    return excluded


def excluded_sources(incident: Incident) -> set[str]:
    """The sources this incident's repair leaves out: as fixed when its walk started, or, before that,
    what scope() would fix now."""
    return set(incident.excluded) if incident.excluded is not None else _excluded_now(incident)


def _excluded_now(incident: Incident) -> set[str]:
    # Its own source and those of the run's incidents whose repair is in the graph (finished_at is set
    # only when a repair has been applied whole). Not the sources of overlapping incidents still open:
    # the graph keeps their effects until their own repairs, which run after this one, so a baseline
    # without them would show their blast radius as this repair's diff.
    repaired = (Incident.objects.filter(workspace_id=incident.workspace_id, run_number=incident.run_number,
                                        finished_at__isnull=False).exclude(pk=incident.pk)
                .values_list("source_id", flat=True))
    return set(repaired) | {incident.source_id}


# --- 2. walk ---
def walk(incident: Incident, graph: Graph, excluded: set[str]) -> dict:
    """The repair plan (repairs.engine): walked in parts by several workers when the radius is large and
    splits (repairs.parts), otherwise in one piece here. An idle worker records the verification's
    baseline meanwhile."""
    offer_to_idle_workers("record_baseline_task", incident.pk)
    progress = Progress(incident.pk, P.WALKING)
    plan = parts.walk_in_parts(incident, graph) if settings.KINTSUGI_REPAIR_PARTS >= 2 else None
    if plan is None:
        plan = compute_plan(graph=graph, session=repair_session(incident, graph, excluded), source=incident.source_id,
                            incident=incident.pk, progress=progress).to_json()
    get_client().flush()  # answers to the re-runs' new inputs, for the baseline and later repairs
    fault_point("walked")
    return plan


# --- 3. plan ---
def checkpoint_plan(incident: Incident, plan: dict) -> None:
    """Store the plan with its outcomes and effects in one transaction: from here on a resumed job
    applies this plan instead of walking again, and an idle worker may start drafting."""
    with transaction.atomic():
        for table in (ActionOutcome, RepairEffect, RepairStep):
            table.objects.filter(incident=incident).delete()
        copy_rows(ActionOutcome, plan["outcomes"], incident_id=incident.pk)
        copy_rows(RepairEffect, plan["effects"], incident_id=incident.pk)
        copy_rows(RepairStep, ({"index": i, "kind": kind, "rows": rows} for i, (kind, rows) in enumerate(plan["steps"])),
                  incident_id=incident.pk)
        touched = incident.outcomes.filter(ticket__gt="").exclude(status=ActionStatus.SKIPPED).values("ticket")
        # What is in its tables now stays out of the plan: one jsonb value holds at most 256 MB.
        incident.plan = {k: v for k, v in plan.items() if k not in ("outcomes", "effects", "steps")}
        incident.plan["step_count"] = len(plan["steps"])
        incident.applied_steps = 0
        incident.blast_radius = plan["blast_radius"]
        incident.counts = plan["counts"]
        incident.effects_invalidated = sum(1 for e in plan["effects"] if e["role"] == RepairEffect.Role.INVALIDATED)
        incident.tickets_untouched = incident.workspace.tickets.exclude(ticket_id__in=touched).count()
        incident.phase = P.APPLYING
        incident.save()
    offer_to_idle_workers("draft_ahead_task", incident.pk)


# --- 4. apply ---
def apply_plan(incident: Incident, graph: Graph) -> None:
    """Apply the plan's steps from the first one not yet applied (each is idempotent, so one applied
    again after a crash between the write and the count changes nothing), then count the workspace's
    actions as the repaired graph holds them."""
    inline = incident.plan.get("steps")  # a plan checkpointed before steps had their own table
    total = len(inline) if inline is not None else incident.plan["step_count"]
    for i in range(incident.applied_steps, total):
        step = inline[i] if inline is not None else incident.steps.values_list("kind", "rows").get(index=i)
        apply_step(graph, tuple(step))
        # The count is the checkpoint and the admin's bar at once (a step takes long enough to show).
        Incident.objects.filter(pk=incident.pk).update(applied_steps=i + 1, phase=P.APPLYING, progress_done=i + 1,
                                                       progress_total=total)
        fault_point(f"applied:{i + 1}")
    Workspace.objects.filter(pk=incident.workspace_id).update(
        action_count=graph.ro_query(queries.ACTION_COUNT)[0].n)


# --- 5. draft and 6. verify ---
def verify_and_draft(incident: Incident) -> None:
    """Verification and drafting: neither depends on the other and idle workers may have started
    either (offered in walk() and checkpoint_plan()); take whatever nobody has started, then wait for
    the rest. Drafting goes first: a reviewer may decide items from here on (compensation.gates), so
    they should not wait behind the verification's whole-desk replay, which only execution waits for."""
    excluded = excluded_sources(incident)

    def verification(wait: bool) -> bool:
        return verify_incident(incident, excluded=excluded, wait=wait)

    def drafting(wait: bool) -> bool:
        return draft_repair(incident=incident, wait=wait)

    chores = [drafting, verification]
    Incident.objects.filter(pk=incident.pk).update(phase=P.VERIFYING, progress_done=0, progress_total=len(chores))
    left = [chore for chore in chores if not chore(False)]
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores) - len(left))
    for chore in left:
        chore(True)
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores))
    fault_point("verified")


# --- 7. finish ---
def finish(incident: Incident) -> Incident:
    """Mark the incident repaired, announce it (compensation.receivers releases the items approved
    while it was verified), and enqueue the repairs that waited for this one."""
    with transaction.atomic():
        # Without the plan (megabytes of JSON on a large repair): save() then writes only loaded fields.
        incident = Incident.objects.select_for_update().select_related("workspace").defer("plan").get(pk=incident.pk)
        transition(incident, S.REPAIRED, actor=None, via=Incident.Via.WORKER, reason="repair finished",
                   compensations=compensation_count(incident=incident), finished_at=timezone.now(), phase=P.DONE,
                   progress_done=1, progress_total=1)
        repair_finished.send(sender=Incident, incident=incident)
        waiting = list(Incident.objects.filter(workspace_id=incident.workspace_id, status=S.BLOCKED,
                                               error__startswith=WAITING_FOR).values_list("pk", flat=True))
        transaction.on_commit(lambda: [enqueue_repair(pk) for pk in waiting])
    return incident


# --- what the steps share ---
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
    from repairs.tasks import repair_incident  # the tasks call this module

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
    from repairs import tasks  # the tasks call this module

    try:
        getattr(tasks, task_name).apply_async(args, retry=False)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the work is not lost, only not shared
        log.warning("incident %s: could not hand %s to another worker: %s", args[0], task_name, exc)


def _half_applied_overlap(incident: Incident) -> Incident | None:
    """Another repair of the same workspace run that has walked but not finished (blocked, failed or
    orphaned): starting this one on top of it would walk a graph that repair is half-way through
    changing, and verify against a baseline that matches neither."""
    if incident.plan is not None:
        return None
    return (Incident.objects.filter(workspace_id=incident.workspace_id, run_number=incident.run_number,
                                    status__in=(S.REPAIRING, S.BLOCKED, S.FAILED), plan__isnull=False,
                                    finished_at__isnull=True)
            .exclude(pk=incident.pk).defer("plan").order_by("pk").first())


def _wait_for(incident: Incident, other: Incident) -> Incident:
    """Block the incident until the other repair finishes (the sweep, or that repair's end, enqueues it
    again); a repeated wait for the same reason records nothing new."""
    message = (f"{WAITING_FOR}{other.pk} ({other.status}): its repair of this workspace is half-applied; "
               f"it resumes on its own after an outage, a failed one needs a retry or a close")
    if incident.status == S.BLOCKED and incident.error == message:
        return incident
    return transition(incident, S.BLOCKED, actor=None, via=Incident.Via.WORKER, reason=message, error=message)


class Progress:
    """Progress of one phase on the incident, written at most every 0.3 s (and always at the end)."""

    def __init__(self, incident_id: int, phase: str):
        self.incident_id, self.phase, self.last = incident_id, phase, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.3:
            return
        self.last = now
        self.write(done, total)

    def write(self, done: int, total: int) -> None:
        Incident.objects.filter(pk=self.incident_id).update(phase=self.phase, progress_done=done, progress_total=total)
