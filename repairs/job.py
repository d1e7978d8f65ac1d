"""The repair job: from a flagged source to a repaired, verified incident with its items drafted.

`repair()` reads as the job's steps; each is a function below it. Every step checkpoints in Postgres
before the next starts, so a worker killed anywhere resumes at the step it was in:

1. scope     fix which sources the repair leaves out (its own and those of repairs already applied);
2. walk      on a snapshot, while the desk records on: find the blast radius, mask the actions that ingested the source and walk the rest in
             seq order, re-running an action only when something upstream of it changed
             (repairs.parts.plan_walk: in parts that several workers walk at once when the radius is
             large, else whole; each walk is repairs.engine);
3. plan      checkpoint the walk's plan, outcomes and effects (nothing reached the graph before);
4. apply     hold the graph, apply the plan's steps, each idempotent, counting them as they land,
             then catch up with the actions the desk committed since the walk's snapshot
             (repairs.catch_up) and apply those too;
5. draft     announce the plan (repairs.signals.repair_planned): compensation turns what already
             left the building into review items, which reviewers may decide from here on, and
6. verify    re-execute the desk without the flagged sources and diff (repairs.verify), which
             execution waits for; both offered to idle workers as soon as they can start;
7. finish    mark the incident repaired (or, when verification differs, needing attention) and wake
             the repairs that waited for this one.

Walking, applying, verifying and done are the phases the incident shows; the job marks when it first
enters each (repairs.phases), which is what the phases' durations are read from.

run_repair() takes the locks that make the job safe to deliver twice and turns an outage into a
blocked incident (the task retries) and anything else into a failed one. Status changes and hand-offs
to workers are repairs.lifecycle's; only repairs.tasks imports this module.
"""
from __future__ import annotations

import json
import logging
import time

import redis
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from core.audit import trail

from core import locks
from core.bulk import copy_rows
from core.locks import advisory_lock
from provenance.recording import containment
from provenance.recording.services import settle_owed
from provenance.graph import queries
from provenance.graph.graph import Graph, GraphUnavailable, workspace_graph
from provenance.models import Workspace
from core.scrub import scrub_secrets
from core.vocabulary import IncidentStatus
from provenance.recording.replay import ReplayUnavailable
from provenance.vocabulary import ActionStatus
from repairs import catch_up, not_rerun, parts, verify_radius
from repairs.faults import fault_point
from repairs.lifecycle import enqueue_repair, offer_to_idle_workers, transition
from repairs.models import ActionOutcome, Incident, RepairEffect, RepairStep
from repairs.phases import enter_phase
from repairs.steps import apply_step
from repairs.signals import repair_finished, repair_planned
from repairs.verify import verification_differs, verify_incident

log = logging.getLogger(__name__)
P = Incident.Phase


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
        # Repairs of one workspace run one at a time, so overlapping incidents see each other's result;
        # the desk records on meanwhile (the graph itself is held only to apply: apply_and_catch_up).
        with advisory_lock(locks.WORKSPACE_REPAIRS, incident.workspace_id, wait=True):
            incident.refresh_from_db()
            if incident.status not in Incident.REPAIRABLE:
                return incident
            unfinished = _half_applied_overlap(incident)
            if unfinished is not None:
                return _wait_for(incident, unfinished)
            try:
                if incident.status != IncidentStatus.REPAIRING:
                    transition(incident, IncidentStatus.REPAIRING, actor=None, via=Incident.Via.WORKER, reason="repair started",
                               attempts=incident.attempts + 1, started_at=incident.started_at or timezone.now(),
                               error="", waiting_for=None)
                return repair(incident)
            except (GraphUnavailable, OperationalError, redis.exceptions.ConnectionError,
                    redis.exceptions.TimeoutError) as exc:
                if not outage(exc):
                    return _failed(incident, exc)
                incident.refresh_from_db()
                message = blocked_reason(exc)
                if isinstance(exc, ReplayUnavailable):
                    return _replay_failed(incident, message)
                if incident.attempts >= settings.KINTSUGI_INCIDENT_MAX_ATTEMPTS:
                    message = f"needs attention after {incident.attempts} attempts: {message}"
                    transition(incident, IncidentStatus.NEEDS_ATTENTION, actor=None, via=Incident.Via.WORKER,
                               reason=message, error=message)
                    return incident  # no more task retries: the sweep resumes it once the store answers
                transition(incident, IncidentStatus.BLOCKED, actor=None, via=Incident.Via.WORKER, reason=message,
                           error=message)
                if isinstance(exc, redis.exceptions.RedisError):
                    raise GraphUnavailable(message) from exc  # the task retries outages by this type
                raise
            except Exception as exc:
                return _failed(incident, exc)


REPLAY_UNREACHABLE = "remote agent unreachable"


def _replay_failed(incident: Incident, message: str) -> Incident:
    """A remote agent did not take its replay: an outage of that agent. The repair blocks and retries on
    the outage schedule (the task's backoff, then the sweep) until the agent has been unreachable for
    KINTSUGI_REPLAY_OUTAGE_SECONDS or KINTSUGI_REPLAY_MAX_ATTEMPTS failures; then it needs attention
    (alerted), and the sweep still resumes it once the agent answers. Never failed for an agent that is
    merely down."""
    failures = incident.replay_failures + 1
    waited = (timezone.now() - (_unreachable_since(incident) or timezone.now())).total_seconds()
    if failures >= settings.KINTSUGI_REPLAY_MAX_ATTEMPTS or waited >= settings.KINTSUGI_REPLAY_OUTAGE_SECONDS:
        message = (f"{message} (unreachable for {waited:.0f} s, failure {failures}: needs attention; the sweep "
                   f"resumes the repair once the agent answers, or retry it)")
        log.error("alert: incident %s needs attention: %s", incident.pk, message)
        return transition(incident, IncidentStatus.NEEDS_ATTENTION, actor=None, via=Incident.Via.WORKER,
                          reason=f"{REPLAY_UNREACHABLE} past its outage schedule", error=message,
                          replay_failures=failures)
    message = f"{message} (failure {failures}; the repair retries once the agent answers)"
    transition(incident, IncidentStatus.BLOCKED, actor=None, via=Incident.Via.WORKER,
               reason=f"{REPLAY_UNREACHABLE}: {message}", error=message, replay_failures=failures)
    raise ReplayUnavailable(message)


def _unreachable_since(incident: Incident):
    """When this run of the repair first found a remote agent unreachable (since its flag or last retry)."""
    opened = incident.transitions.filter(to_status=IncidentStatus.OPEN).order_by("-at").values_list("at", flat=True).first()
    first = incident.transitions.filter(reason__startswith=REPLAY_UNREACHABLE)
    if opened is not None:
        first = first.filter(at__gte=opened)
    return first.order_by("at").values_list("at", flat=True).first()


def blocked_reason(exc: Exception) -> str:
    """What a blocked incident says: which store is away, then the error's first line."""
    text = scrub_secrets(str(exc).splitlines()[0]) if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OperationalError):
        if (getattr(exc.__cause__, "sqlstate", None) or "")[:2] == "40":
            return f"Postgres rolled the step back (retried): {text}"
        return f"Postgres unreachable: {text}"
    if isinstance(exc, redis.exceptions.RedisError):
        return f"FalkorDB unreachable: {type(exc).__name__}: {text}"
    return text


def outage(exc: Exception) -> bool:
    """Whether an error is a store being away (retry later) rather than one retrying cannot mend: every
    GraphUnavailable, and the Postgres errors of a lost or refused connection (no SQLSTATE, class 08),
    an operator's shutdown (57), exhausted resources (53) or a transaction Postgres rolled back to
    break a deadlock or a serialisation conflict (40: the next attempt goes through). A limit the data exceeds (54, say a jsonb
    value over 256 MB) fails the repair instead of blocking it for ever."""
    if isinstance(exc, (GraphUnavailable, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return True  # FalkorDB refused, reset or went silent past its timeout (a frozen server)
    state = getattr(exc.__cause__, "sqlstate", None)
    return state is None or state[:2] in ("08", "40", "53", "57")


def _failed(incident: Incident, exc: Exception) -> Incident:
    log.exception("repair of incident %s failed", incident.pk)
    incident.refresh_from_db()
    return transition(incident, IncidentStatus.FAILED, actor=None, via=Incident.Via.WORKER, reason="repair failed",
                      error=scrub_secrets(f"{type(exc).__name__}: {exc}"))


def repair(incident: Incident) -> Incident:
    """The job's steps, resumed from wherever the last attempt checkpointed."""
    graph = workspace_graph(incident.workspace.name)
    if incident.plan is None:
        settle_owed(workspace=incident.workspace)  # a failed recording's orphan nodes go before the walk reads
        excluded = scope(incident)
        plan = walk(incident, graph, excluded)
        checkpoint_plan(incident, plan)
    apply_and_catch_up(incident, graph)
    verify_and_draft(incident)
    return finish(incident)


# --- 1. scope ---
def scope(incident: Incident) -> set[str]:
    """Fix what the repair leaves out as its walk starts (under the workspace's repairs lock, so no
    other repair of the workspace finishes meanwhile); the walk, its parts and the verification all use it."""
    excluded = incident.excluded_now()
    incident.excluded = sorted(excluded)
    Incident.objects.filter(pk=incident.pk).update(excluded=incident.excluded, baseline_for=None, verification=None)
    return excluded


# --- 2. walk ---
def walk(incident: Incident, graph: Graph, excluded: set[str]) -> dict:
    """The repair plan of the actions below a snapshot taken as it starts, walked in parts or whole
    while the desk records on (repairs.parts.plan_walk); what commits meanwhile is caught up with in
    apply_and_catch_up()."""
    enter_phase(incident.pk, P.WALKING)  # first: a graph away from here on is an outage the walk waited through
    containment.ensure(incident_id=incident.pk, via=Incident.Via.WORKER)  # a flag that could not contain at once
    containment.lift_orphans(workspace=incident.workspace)  # marks of a flag whose commit failed
    return parts.plan_walk(incident, graph, excluded)


# --- 3. plan ---
def checkpoint_plan(incident: Incident, plan: dict) -> None:
    """Store the plan with its outcomes and effects in one transaction: from here on a resumed job
    applies this plan instead of walking again (and catches up with the desk once it has applied it)."""
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
        enter_phase(incident.pk, P.APPLYING)


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


def apply_and_catch_up(incident: Incident, graph: Graph) -> None:
    """Hold the graph (a recording that commits now waits, and lands after) to apply the walk's plan,
    then catch up with the actions committed since its snapshot (repairs.catch_up) and apply that
    too. From here on verification and drafting cover everything committed below `through`; idle
    workers may start them."""
    with advisory_lock(locks.WORKSPACE_GRAPH, incident.workspace_id, wait=True):
        held_from = time.monotonic()
        catch_up.hold_reserved_ids(incident, graph)
        if incident.applied_steps == 0 and "before_apply" not in incident.plan:
            note_boundary(incident, graph)
        apply_plan(incident, graph)
        if catch_up.catch_up(incident, graph):
            incident.refresh_from_db()
            apply_plan(incident, graph)
        # Everything the containment held is repaired now: live reads see the repaired facts.
        containment.replace_with_repair(incident_id=incident.pk, graph=graph)
        catch_up.release_ids(graph)
    # How long the desk's recordings could not commit: the only hold a repair puts on them.
    held = round(time.monotonic() - held_from, 3)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE repairs_incident SET plan = jsonb_set(plan, '{graph_held_seconds}', %s::jsonb) "
                       "WHERE id = %s", [json.dumps(held), incident.pk])
    offer_to_idle_workers("record_baseline_task", incident.pk)
    offer_to_idle_workers("draft_ahead_task", incident.pk)


def note_boundary(incident: Incident, graph: Graph) -> None:
    """What the desk holds just before the plan lands (the graph held): the verification counts the
    boundary of what it re-runs against it (repairs.verify_radius). Kept by a resumed apply."""
    incident.plan["before_apply"] = verify_radius.boundary_counts(graph)
    with connection.cursor() as cursor:  # into the stored plan, without writing the rest of it again
        cursor.execute("UPDATE repairs_incident SET plan = jsonb_set(plan, '{before_apply}', %s::jsonb) WHERE id = %s",
                       [json.dumps(incident.plan["before_apply"]), incident.pk])


# --- 5. draft and 6. verify ---
def verify_and_draft(incident: Incident) -> None:
    """Verification and drafting: neither depends on the other and idle workers may have started
    either (offered in apply_and_catch_up()); take whatever nobody has started, then wait for
    the rest. Drafting goes first: a reviewer may decide items from here on (compensation.delivery.gates), so
    they should not wait behind the verification's whole-desk replay, which only execution waits for."""
    excluded = incident.excluded_sources()

    def verification(wait: bool) -> bool:
        return verify_incident(incident, excluded=excluded, wait=wait)

    def drafting(wait: bool) -> bool:
        return all(done for _, done in repair_planned.send(sender=Incident, incident=incident, wait=wait))

    chores = [drafting, verification]
    Incident.objects.filter(pk=incident.pk).update(phase=P.VERIFYING, progress_done=0, progress_total=len(chores))
    enter_phase(incident.pk, P.VERIFYING)
    left = [chore for chore in chores if not chore(False)]
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores) - len(left))
    for chore in left:
        chore(True)
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores))
    fault_point("verified")


# --- 7. finish ---
def finish(incident: Incident) -> Incident:
    """Mark the incident repaired when its verification found no difference and announce it
    (compensation.receivers releases the items approved while it was verified); one whose verification
    differs is never repaired: it needs attention, the differences on it, and its approved items stay
    held (compensation.delivery.gates). Its `compensations` count is the drafting's (set once every part is
    drafted, compensation.receivers). Either way the repair is in the graph: enqueue the repairs that waited."""
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)  # chain before the incident's row (repairs.lifecycle.transition)
        # Without the plan (megabytes of JSON on a large repair): save() then writes only loaded fields.
        incident = Incident.objects.select_for_update().select_related("workspace").defer("plan").get(pk=incident.pk)
        differs = verification_differs(incident.verification)
        # Traced actions taken out instead of re-run: repaired with review (docs/otel.md says why not needs attention).
        status, reason = ((IncidentStatus.NEEDS_ATTENTION, differs) if differs else
                          (IncidentStatus.REPAIRED, not_rerun.finish_reason(incident) or "repair finished"))
        transition(incident, status, actor=None, via=Incident.Via.WORKER, reason=reason, error=differs or "",
                   finished_at=timezone.now(), phase=P.DONE,
                   progress_done=1, progress_total=1)
        enter_phase(incident.pk, P.DONE)
        if not differs:
            containment.settle(incident_id=incident.pk)  # held effects: performed if the clean run made them too
            repair_finished.send(sender=Incident, incident=incident)
        waiting = list(Incident.objects.filter(workspace_id=incident.workspace_id, waiting_for__isnull=False,
                                               status__in=(IncidentStatus.BLOCKED, IncidentStatus.NEEDS_ATTENTION)).values_list("pk", flat=True))
        transaction.on_commit(lambda: [enqueue_repair(pk) for pk in waiting])
    return incident


def _half_applied_overlap(incident: Incident) -> Incident | None:
    """Another repair of the same workspace run that has walked but not finished (blocked, failed or
    orphaned): starting this one on top of it would walk a graph that repair is half-way through
    changing, and verify against a baseline that matches neither."""
    if incident.plan is not None:
        return None
    return (Incident.objects.filter(workspace_id=incident.workspace_id, run_number=incident.run_number,
                                    status__in=(IncidentStatus.REPAIRING, IncidentStatus.BLOCKED, IncidentStatus.FAILED), plan__isnull=False,
                                    finished_at__isnull=True)
            .exclude(pk=incident.pk).defer("plan").order_by("pk").first())


def _wait_for(incident: Incident, other: Incident) -> Incident:
    """Block the incident until the other repair finishes (the sweep, or that repair's end, enqueues it
    again); a repeated wait for the same reason records nothing new."""
    if other.status == IncidentStatus.FAILED:
        # Nothing resumes a failed repair on its own: say so where people look (needs attention is alerted
        # on), instead of waiting in silence; its retry or close wakes this one (finish(), the sweep).
        status = IncidentStatus.NEEDS_ATTENTION
        message = (f"waiting for incident #{other.pk} (failed): its repair of this workspace is half-applied; "
                   f"retry or close incident #{other.pk} and this one resumes")
    else:
        status = IncidentStatus.BLOCKED
        message = (f"waiting for incident #{other.pk} ({other.status}): its repair of this workspace is half-applied; "
                   f"it resumes on its own after an outage")
    if incident.status == status and incident.waiting_for_id == other.pk and incident.error == message:
        return incident
    return transition(incident, status, actor=None, via=Incident.Via.WORKER, reason=message, error=message,
                      waiting_for=other)
