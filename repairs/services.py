"""An incident's life around its repair: flag, retry, close. Every state change is attributed (actor,
reason, via); the repair itself is repairs.job."""
from __future__ import annotations

from django.db import IntegrityError, connection, transaction

from core.audit import trail

from core import locks
from core.errors import DomainError
from core.users import get_user  # noqa: F401  (also importable from here)
from core.vocabulary import IncidentStatus, Via
from provenance.access import capabilities, tenancy
from provenance.recording import containment, quarantine
from provenance import validation
from provenance.models import Source, Workspace
from provenance.recording.recorder import UnknownSource
from provenance.vocabulary import COUNT_KEYS
from repairs import phases
from repairs.lifecycle import enqueue_repair, record_transition, transition
from repairs.models import Incident
from repairs.not_rerun import not_rerun_summary
from repairs.signals import incident_closed



class IncidentAlreadyOpen(DomainError):
    code, status = "incident_already_open", 409

    def __init__(self, incident: Incident):
        self.incident = incident
        super().__init__(f"source {incident.source_id!r} already has open incident #{incident.pk} "
                         f"({incident.status}) in workspace {incident.workspace.name!r}")

    def details(self):
        return {"incident": self.incident.pk, "status": self.incident.status}


class RefusedTransition(DomainError, ValueError):
    code, status = "refused_transition", 409


class RepairInProgress(DomainError, ValueError):
    code, status = "refused_transition", 409


def _can_flag(actor, via: str) -> bool:
    # The CLI runs with shell access to the deployment, so --user names who to attribute the flag to;
    # the admin, the API and MCP hand the decision to whoever is logged in, so they need the role.
    return capabilities.may(actor, "flag", via=via)


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
    existing = Incident.objects.open_of_source(workspace=workspace, source_id=source_id).first()
    if existing:
        raise IncidentAlreadyOpen(existing)
    # The marks follow the commit. Written in the flag's own transaction they contain at once (no
    # recording commits half-way: the transaction holds the graph's lock); when that transaction fails,
    # commit included, they are taken off again. A flag inside a caller's transaction cannot see that
    # commit: its marks are written after it (the "not contained yet" path).
    owns_commit = not transaction.get_connection().in_atomic_block
    marked = None
    try:
        with transaction.atomic():
            # The graph's lock before the incident's row (which locks the workspace's row for its key),
            # as every writer of the graph takes them: the containment below is written under it.
            graph_held = containment.hold_graph(workspace)
            incident = Incident.objects.create(workspace=workspace, run_number=workspace.run_number,
                                               source_id=source_id, reason=reason, flagged_by=actor,
                                               flagged_via=via)
            record_transition(incident_id=incident.pk, workspace_id=workspace.pk, actor=actor, via=via, from_status="",
                              to_status=IncidentStatus.OPEN, reason=reason)
            # The flag holds from now on: live recordings get no content from the source until a lead
            # closes the incident as a false alarm.
            quarantine.quarantine_source(workspace=workspace, source_id=source_id, incident_id=incident.pk,
                                         actor=actor, reason=reason, via=via)
            # ...and what it already put into memory is contained: live reads resolve around it and the
            # effects of recordings that read through it are held, until the repair lands or a lead
            # closes the incident as a false alarm.
            contained = containment.contain(workspace=workspace, incident_id=incident.pk, source_id=source_id,
                                            flagged_at=incident.created_at, actor=actor, reason=reason, via=via,
                                            locked=graph_held and owns_commit)
            marked = contained.incident_id if contained.contained_at is not None else None
            if contained.contained_at is None:
                transaction.on_commit(lambda: containment.ensure_quietly(incident_id=incident.pk, via=via))
            transaction.on_commit(lambda: enqueue_repair(incident.pk))
    except BaseException as exc:
        if marked is not None:
            containment.unmark_quietly(workspace=workspace, incident_id=marked)
        # Two flags raced past the check above; the partial unique index let exactly one through.
        winner = Incident.objects.open_of_source(workspace=workspace, source_id=source_id).first()
        if isinstance(exc, IntegrityError) and winner is not None:
            raise IncidentAlreadyOpen(winner) from None
        raise
    incident.refresh_from_db(fields=["status", "error"])  # the enqueue after commit blocks it if the broker is down
    return incident


def retry_incident(*, incident: Incident, actor, reason: str, via: str) -> Incident:
    """Send a failed or blocked repair back to the worker; it resumes from its checkpoint."""
    reason = validation.reason(reason, required=False)
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"incident {incident.pk}")
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)  # chain before the incident's row (repairs.lifecycle.transition)
        incident = Incident.objects.select_for_update().get(pk=incident.pk)
        # "needs attention" is blocked past its bound of attempts, and retried like it (Incident.RETRYABLE).
        if not incident.may_retry():
            raise RefusedTransition(f"incident #{incident.pk} is {incident.status}; only failed or blocked repairs are retried")
        transition(incident, IncidentStatus.OPEN, actor=actor, via=via, reason=reason or "retry", error="",
                   replay_failures=0)
        transaction.on_commit(lambda: enqueue_repair(incident.pk))
    incident.refresh_from_db(fields=["status", "error"])  # blocked again if the broker refused the task
    return incident


def close_incident(*, incident: Incident, actor, reason: str, via: str, false_alarm: bool = False) -> Incident:
    """Close an incident (not while it is repairing); a reason is required and recorded. Its source
    stays quarantined, and what it wrote contained, unless the lead closes it as a false alarm, which lets
    the source be read again and lifts the containment (provenance.recording.containment)."""
    reason = validation.reason(reason)
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"incident {incident.pk}")
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)  # chain before the incident's row (repairs.lifecycle.transition)
        incident = Incident.objects.select_for_update().get(pk=incident.pk)
        if not incident.may_close() and incident.status != IncidentStatus.CLOSED:
            raise RefusedTransition(f"incident #{incident.pk} is repairing; wait for it to finish")
        if false_alarm and not _can_flag(actor, via):
            raise PermissionError(f"user {actor.get_username()!r} may not lift a quarantine (Support lead role needed)")
        if incident.status == IncidentStatus.CLOSED:
            # An incident closed earlier (after its repair, or by a desk run) still holds its source's
            # quarantine: a false alarm found later lifts it, and only that.
            if false_alarm and quarantine.lift(incident_id=incident.pk, actor=actor, reason=f"false alarm: {reason}",
                                               via=via):
                containment.lift(incident_id=incident.pk, actor=actor, reason=f"false alarm: {reason}", via=via)
                return incident
            raise RefusedTransition(f"incident #{incident.pk} is already closed")
        if false_alarm:
            quarantine.lift(incident_id=incident.pk, actor=actor, reason=f"false alarm: {reason}", via=via)
            containment.lift(incident_id=incident.pk, actor=actor, reason=f"false alarm: {reason}", via=via)
        transition(incident, IncidentStatus.CLOSED, actor=actor, via=via,
                   reason=f"false alarm: {reason}" if false_alarm else reason)
        incident_closed.send(sender=Incident, incident=incident, actor=actor, reason=reason, via=via)
    return incident


def repairs_running() -> set[int]:
    """Incidents whose repair is running right now: some session holds their advisory lock."""
    with connection.cursor() as cur:
        cur.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted",
                    [locks.REPAIR])
        return {row[0] for row in cur.fetchall()}


def orphaned_incidents():
    """Repairs that should be running but are not: `repairing` with nobody holding their lock (the
    task died with its whole worker, or the message was lost)."""
    running = repairs_running()
    return [i for i in Incident.objects.filter(status=IncidentStatus.REPAIRING).select_related("workspace").defer("plan")
            if i.pk not in running]


def resume_orphaned_repairs(*, skip_servers: frozenset[str] = frozenset()) -> list[int]:
    """Enqueue every open or orphaned repair again, except those of workspaces placed on `skip_servers`;
    the job resumes each from its checkpoint and ignores a duplicate delivery. Called when a worker
    starts, and by the outage sweep."""
    ids = ([i.pk for i in orphaned_incidents() if i.workspace.falkordb_server not in skip_servers]
           + list(Incident.objects.filter(status=IncidentStatus.OPEN).exclude(workspace__falkordb_server__in=skip_servers)
                  .values_list("pk", flat=True)))
    for pk in ids:
        enqueue_repair(pk)
    return ids


def close_for_replaced_run(*, workspace: Workspace, actor, reason: str) -> None:
    """A desk run replaces the graph its incidents describe: close them (refuse while one repairs;
    an orphaned repair is closed with the rest, since the graph it would resume is being replaced)."""
    running = repairs_running()
    busy = workspace.incidents.filter(status=IncidentStatus.REPAIRING, pk__in=running).first()
    if busy:
        raise RepairInProgress(f"incident #{busy.pk} is repairing workspace {workspace.name!r}; try again when it is done")
    containment.end_with_run(workspace=workspace)
    for incident in workspace.incidents.open():
        transition(incident, IncidentStatus.CLOSED, actor=actor, via=Incident.Via.CLI if actor else Incident.Via.WORKER,
                    reason=f"{reason}: workspace run replaced")
        incident_closed.send(sender=Incident, incident=incident, actor=actor, reason=reason, via=Via.WORKER)


MAX_DIFFERENCES = 50


def incident_summary(incident: Incident) -> dict:
    """The flag_source --json shape, also used by the API and MCP."""
    v = incident.verification or {}
    return {
        "incident": incident.pk,
        "status": incident.status,
        "workspace": incident.workspace.name,
        "source": incident.source_id,
        "blast_radius": incident.blast_radius,
        "counts": {k: (incident.counts or {}).get(k, 0) for k in COUNT_KEYS},
        "effects_invalidated": incident.effects_invalidated,
        "compensations": incident.compensations,
        # The differing rows too (at most MAX_DIFFERENCES; `differences_total` counts them all): a repair
        # that is not the clean run says where, wherever its status is read.
        "verification": {**{k: v.get(k) for k in ("facts", "decisions", "effects")},
                         "differences": v.get("rows", [])[:MAX_DIFFERENCES],
                         "differences_total": len(v.get("rows", [])),
                         # What it cost: "radius" re-ran what the source could change, "full" the desk.
                         **{k: v.get(k) for k in ("scope", "actions_rerun", "replay_calls", "seconds")},
                         "full": ({k: v["full"].get(k) for k in ("facts", "decisions", "effects", "actions_rerun",
                                                                 "replay_calls", "seconds", "at", "by")}
                                  if v.get("full") else None)},
        "progress": {"phase": incident.phase, "done": incident.progress_done, "total": incident.progress_total,
                     "percent": incident.percent},
        "error": incident.error or None,
        "timings": phases.timings(incident),
        # Actions recorded from traces, taken out instead of re-run (null: none), with their review items.
        "not_rerun": not_rerun_summary(incident),
    }
