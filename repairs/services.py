"""Incident lifecycle and the repair job. Every state change is attributed (actor, reason, via)."""
from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from kintsugi_site import locks
from provenance import queries, tenancy, validation
from provenance.graph import GraphUnavailable, workspace_graph
from provenance.llm import get_client
from provenance.models import Source, Workspace
from provenance.recorder import UnknownSource
from provenance.scrub import scrub_secrets
from provenance.services import WORKSPACE_LOCK
from repairs.engine import apply_step, compute_plan
from repairs.models import ActionOutcome, Incident, IncidentTransition, RepairEffect
from repairs.parts import parallel_plan
from repairs.runtime import Progress, advisory_lock, fault_point, fix_excluded_sources, repair_session
from repairs.signals import incident_closed, repair_finished, repair_planned
from repairs.verify import verify_incident

log = logging.getLogger(__name__)
S = Incident.Status


class IncidentAlreadyOpen(Exception):
    def __init__(self, incident: Incident):
        self.incident = incident
        super().__init__(f"source {incident.source_id!r} already has open incident #{incident.pk} "
                         f"({incident.status}) in workspace {incident.workspace.name!r}")


class RefusedTransition(ValueError):
    pass


class RepairInProgress(ValueError):
    pass


def _transition(incident: Incident, to: str, *, actor, via: str, reason: str, **fields) -> Incident:
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


def _can_flag(actor, via: str) -> bool:
    # The CLI runs with shell access to the deployment, so --user names who to attribute the flag to;
    # the admin, the API and MCP hand the decision to whoever is logged in, so they need the role.
    return via == Incident.Via.CLI or actor.has_perm("repairs.flag_source")


def flag_source(*, workspace: Workspace, source_id: str, actor, reason: str, via: str) -> Incident:
    """Open an incident for a bad source and enqueue its repair once the row is committed."""
    reason = validation.reason(reason)
    validation.source_id(source_id)
    if not actor.is_active:
        raise PermissionError(f"user {actor.get_username()!r} is inactive")
    tenancy.require_visible(actor, workspace, via=via, what=f"workspace {workspace.name!r}")
    if not _can_flag(actor, via):
        raise PermissionError(f"user {actor.get_username()!r} may not flag sources (Support lead role needed)")
    if not Source.objects.filter(workspace=workspace, source_id=source_id).exists():
        raise UnknownSource(f"unknown source {source_id!r} in workspace {workspace.name!r}")
    existing = Incident.objects.filter(workspace=workspace, source_id=source_id).exclude(status=S.CLOSED).first()
    if existing:
        raise IncidentAlreadyOpen(existing)
    try:
        with transaction.atomic():
            incident = Incident.objects.create(workspace=workspace, run_number=workspace.run_number,
                                               source_id=source_id, reason=reason, flagged_by=actor,
                                               flagged_via=via)
            IncidentTransition.objects.create(incident=incident, actor=actor, via=via, to_status=S.OPEN, reason=reason)
            transaction.on_commit(lambda: enqueue_repair(incident.pk))
    except IntegrityError:
        # Two flags raced past the check above; the partial unique index let exactly one through.
        raise IncidentAlreadyOpen(Incident.objects.exclude(status=S.CLOSED).get(workspace=workspace,
                                                                                 source_id=source_id)) from None
    incident.refresh_from_db(fields=["status", "error"])  # the enqueue after commit blocks it if the broker is down
    return incident


def enqueue_repair(incident_id: int) -> None:
    from repairs.tasks import repair_incident

    try:
        repair_incident.delay(incident_id)
    except Exception as exc:  # the broker is down: say so on the incident instead of losing the job
        log.warning("could not enqueue repair of incident %s: %s", incident_id, exc)
        error = f"could not enqueue the repair: {exc}"
        with transaction.atomic():
            if Incident.objects.filter(pk=incident_id, status=S.OPEN).update(status=S.BLOCKED, error=error):
                # Every status change leaves a transition (and, through it, an audit event).
                IncidentTransition.objects.create(incident_id=incident_id, via=Incident.Via.WORKER,
                                                  from_status=S.OPEN, to_status=S.BLOCKED, reason=error)


def retry_incident(*, incident: Incident, actor, reason: str, via: str) -> Incident:
    """Send a failed or blocked repair back to the worker; it resumes from its checkpoint."""
    reason = validation.reason(reason, required=False)
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"incident {incident.pk}")
    with transaction.atomic():
        incident = Incident.objects.select_for_update().get(pk=incident.pk)
        if incident.status not in (S.FAILED, S.BLOCKED):
            raise RefusedTransition(f"incident #{incident.pk} is {incident.status}; only failed or blocked repairs are retried")
        _transition(incident, S.OPEN, actor=actor, via=via, reason=reason or "retry", error="")
        transaction.on_commit(lambda: enqueue_repair(incident.pk))
    incident.refresh_from_db(fields=["status", "error"])  # blocked again if the broker refused the task
    return incident


def close_incident(*, incident: Incident, actor, reason: str, via: str) -> Incident:
    """Close an incident (not while it is repairing); a reason is required and recorded."""
    reason = validation.reason(reason)
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"incident {incident.pk}")
    with transaction.atomic():
        incident = Incident.objects.select_for_update().get(pk=incident.pk)
        if incident.status == S.REPAIRING:
            raise RefusedTransition(f"incident #{incident.pk} is repairing; wait for it to finish")
        if incident.status == S.CLOSED:
            raise RefusedTransition(f"incident #{incident.pk} is already closed")
        _transition(incident, S.CLOSED, actor=actor, via=via, reason=reason)
        incident_closed.send(sender=Incident, incident=incident, actor=actor, reason=reason, via=via)
    return incident


REPAIR_LOCK = locks.REPAIR  # advisory lock namespace: (REPAIR_LOCK, incident id) is held while a repair runs


def _repairs_running() -> set[int]:
    """Incidents whose repair is running right now: some session holds their advisory lock."""
    with connection.cursor() as cur:
        cur.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted",
                    [REPAIR_LOCK])
        return {row[0] for row in cur.fetchall()}


def orphaned_incidents():
    """Repairs that should be running but are not: `repairing` with nobody holding their lock (the
    task died with its whole worker, or the message was lost)."""
    running = _repairs_running()
    return [i for i in Incident.objects.filter(status=S.REPAIRING) if i.pk not in running]


def resume_orphaned_repairs() -> list[int]:
    """Enqueue every open or orphaned repair again; run_repair resumes each from its checkpoint and
    ignores a duplicate delivery. Called when a worker starts."""
    ids = [i.pk for i in orphaned_incidents()] + list(Incident.objects.filter(status=S.OPEN).values_list("pk", flat=True))
    for pk in ids:
        enqueue_repair(pk)
    return ids


def close_for_replaced_run(*, workspace: Workspace, actor, reason: str) -> None:
    """A desk run replaces the graph its incidents describe: close them (refuse while one repairs;
    an orphaned repair is closed with the rest, since the graph it would resume is being replaced)."""
    running = _repairs_running()
    busy = workspace.incidents.filter(status=S.REPAIRING, pk__in=running).first()
    if busy:
        raise RepairInProgress(f"incident #{busy.pk} is repairing workspace {workspace.name!r}; try again when it is done")
    for incident in workspace.incidents.exclude(status=S.CLOSED):
        _transition(incident, S.CLOSED, actor=actor, via=Incident.Via.CLI if actor else Incident.Via.WORKER,
                    reason=f"{reason}: workspace run replaced")
        incident_closed.send(sender=Incident, incident=incident, actor=actor, reason=reason, via="worker")


def run_repair(*, incident_id: int, supersede: bool = True) -> Incident | None:
    """Repair the workspace after a flag. Safe to call twice at once (the second returns None) and
    after a crash at any point (it resumes from the checkpoint). Raises GraphUnavailable after marking
    the incident blocked, so the task can retry."""
    with advisory_lock(REPAIR_LOCK, incident_id, wait=False) as mine:
        if not mine:
            return None
        incident = Incident.objects.select_related("workspace").get(pk=incident_id)
        if incident.status not in (S.OPEN, S.REPAIRING, S.BLOCKED):
            return incident
        # Repairs of one workspace run one at a time, so overlapping incidents see each other's result.
        with advisory_lock(WORKSPACE_LOCK, incident.workspace_id, wait=True):
            incident.refresh_from_db()
            if incident.status not in (S.OPEN, S.REPAIRING, S.BLOCKED):
                return incident
            unfinished = _half_applied_overlap(incident)
            if unfinished is not None:
                return _wait_for(incident, unfinished)
            try:
                if incident.status != S.REPAIRING:
                    _transition(incident, S.REPAIRING, actor=None, via=Incident.Via.WORKER, reason="repair started",
                                attempts=incident.attempts + 1, started_at=incident.started_at or timezone.now(),
                                error="")
                return _repair(incident, supersede=supersede)
            except (GraphUnavailable, OperationalError) as exc:
                incident.refresh_from_db()
                message = scrub_secrets(str(exc).splitlines()[0])
                _transition(incident, S.BLOCKED, actor=None, via=Incident.Via.WORKER, reason=message, error=message)
                raise
            except Exception as exc:
                log.exception("repair of incident %s failed", incident.pk)
                incident.refresh_from_db()
                _transition(incident, S.FAILED, actor=None, via=Incident.Via.WORKER, reason="repair failed",
                            error=scrub_secrets(f"{type(exc).__name__}: {exc}"))
                return incident


WAITING_FOR = "waiting for incident #"  # how a blocked incident's error starts when it waits for another


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
    return _transition(incident, S.BLOCKED, actor=None, via=Incident.Via.WORKER, reason=message, error=message)


def _repair(incident: Incident, *, supersede: bool) -> Incident:
    ws = incident.workspace
    graph = workspace_graph(ws.name)
    if incident.plan is None:
        excluded = fix_excluded_sources(incident)
        Incident.objects.filter(pk=incident.pk).update(baseline_for=None, verification=None)
        if settings.KINTSUGI_REPAIR_HELPERS:
            from repairs.tasks import record_baseline_task  # tasks import this module

            _hand_off(record_baseline_task, incident.pk)  # an idle worker records it while this one walks
        plan = parallel_plan(incident, graph, supersede=supersede)
        if plan is None:
            plan = compute_plan(graph=graph, session=repair_session(incident, graph, excluded),
                                source=incident.source_id, incident=incident.pk,
                                progress=Progress(incident.pk, "walking"), supersede=supersede).to_json()
        get_client().flush()  # answers to the re-runs' new inputs, for the baseline and later repairs
        fault_point("walked")
        with transaction.atomic():
            ActionOutcome.objects.filter(incident=incident).delete()
            RepairEffect.objects.filter(incident=incident).delete()
            ActionOutcome.objects.bulk_create(ActionOutcome(incident=incident, **o) for o in plan["outcomes"])
            RepairEffect.objects.bulk_create(RepairEffect(incident=incident, **e) for e in plan["effects"])
            incident.plan = plan
            incident.applied_steps = 0
            incident.blast_radius = plan["blast_radius"]
            incident.counts = plan["counts"]
            incident.effects_invalidated = sum(1 for e in plan["effects"] if e["role"] == "invalidated")
            touched = {o["ticket"] for o in plan["outcomes"] if o["ticket"] and o["status"] != "skipped"}
            incident.tickets_untouched = ws.tickets.exclude(ticket_id__in=touched).count()
            incident.phase = "applying"
            incident.save()
        if settings.KINTSUGI_REPAIR_HELPERS:
            from repairs.tasks import draft_ahead_task

            _hand_off(draft_ahead_task, incident.pk)  # an idle worker drafts the items while this one applies
    steps = incident.plan["steps"]
    progress = Progress(incident.pk, "applying")
    for i in range(incident.applied_steps, len(steps)):
        apply_step(graph, steps[i])
        Incident.objects.filter(pk=incident.pk).update(applied_steps=i + 1)
        progress(i + 1, len(steps))
        fault_point(f"applied:{i + 1}")
    _prepare_finish(incident)
    fault_point("verified")
    with transaction.atomic():
        # Without the plan (megabytes of JSON on a large repair): save() then writes only loaded fields.
        incident = Incident.objects.select_for_update().defer("plan").get(pk=incident.pk)
        replies = repair_finished.send(sender=Incident, incident=incident)
        drafted = [r for _, r in replies if isinstance(r, int)]
        incident.compensations = sum(drafted) if drafted else incident.effects_invalidated
        ws.action_count = graph.ro_query(queries.ACTION_COUNT)[0][0]
        ws.save(update_fields=["action_count"])
        _transition(incident, S.REPAIRED, actor=None, via=Incident.Via.WORKER, reason="repair finished",
                    finished_at=timezone.now(), phase="done", progress_done=1, progress_total=1)
        waiting = list(Incident.objects.filter(workspace=ws, status=S.BLOCKED, error__startswith=WAITING_FOR)
                       .values_list("pk", flat=True))
        transaction.on_commit(lambda: [enqueue_repair(pk) for pk in waiting])
    return incident


def _hand_off(task, incident_id: int) -> None:
    """Offer work to idle workers. Optional: if the broker refuses it, the repairing worker does it."""
    try:
        task.apply_async((incident_id,), retry=False)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the work is not lost, only not shared
        log.warning("incident %s: could not hand %s to another worker: %s", incident_id, task.name, exc)


def _prepare_finish(incident: Incident) -> None:
    """Verify the applied repair against the clean baseline, and draft the compensation items. Neither
    depends on the other, so idle workers may already be doing them (their tasks are enqueued by
    _repair): take whatever nobody has started, then wait for the rest."""
    def verification(wait: bool) -> bool:
        return verify_incident(incident, wait=wait)

    def drafts(wait: bool) -> bool:
        return all(done for _, done in repair_planned.send(sender=Incident, incident=incident, wait=wait))

    chores = [verification, drafts]
    Incident.objects.filter(pk=incident.pk).update(phase="verifying", progress_done=0, progress_total=len(chores))
    left = [chore for chore in chores if not chore(False)]
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores) - len(left))
    for chore in left:
        chore(True)
    Incident.objects.filter(pk=incident.pk).update(progress_done=len(chores))


def get_user(username: str):
    User = get_user_model()
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise LookupError(f"unknown user {username!r}") from None


def incident_summary(incident: Incident) -> dict:
    """The flag_source --json shape, also used by the API and MCP."""
    v = incident.verification or {}
    return {
        "incident": incident.pk,
        "status": incident.status,
        "workspace": incident.workspace.name,
        "source": incident.source_id,
        "blast_radius": incident.blast_radius,
        "counts": {k: (incident.counts or {}).get(k, 0) for k in
                   ("poisoned", "rerun_changed", "rerun_same", "skipped", "superseded", "new")},
        "effects_invalidated": incident.effects_invalidated,
        "compensations": incident.compensations,
        "verification": {k: v.get(k) for k in ("facts", "decisions", "effects")},
        "progress": {"phase": incident.phase, "done": incident.progress_done, "total": incident.progress_total,
                     "percent": incident.percent},
        "error": incident.error or None,
    }
