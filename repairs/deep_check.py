"""The whole-desk replay, on demand (`manage.py verify --full`, the API, the admin) and on a schedule (the
beat's deep check): a repair's own verification re-runs only what its flagged source could change
(repairs.verify_radius); this replays every root of the desk without the flagged sources, as a repair
once did, and diffs the whole repaired desk against it. Its result goes into the incident's verification
(`full`) and its history (an audit event); one that differs puts a repaired incident in need of
attention, its items held, as any verification that differs does."""
from __future__ import annotations

import time

from django.db import transaction
from django.utils import timezone

from core.audit import trail

from core import locks
from core.broker import send
from core.errors import DomainError
from core.locks import advisory_lock
from core.vocabulary import AuditAction, IncidentStatus
from provenance.access import capabilities, tenancy
from provenance import validation
from repairs.lifecycle import transition
from repairs.models import Incident
from repairs.verify import diff_workspace, record_baseline, verification_differs

FINISHED = (IncidentStatus.REPAIRED, IncidentStatus.NEEDS_ATTENTION)
MAX_ROWS = 200  # differing rows kept on the incident (the counts cover them all)


class NotVerifiable(DomainError):
    code = "conflict"
    status = 409


class BrokerRefused(DomainError):
    code = "unavailable"
    status = 503


def latest_repair(*, workspace) -> Incident | None:
    """The workspace's last finished repair: its verification covers every repair applied before it."""
    return (Incident.objects.filter(workspace=workspace, status__in=FINISHED, finished_at__isnull=False)
            .defer("plan", "verification").order_by("-finished_at", "-pk").first())


def _allowed(incident: Incident, actor, via: str) -> None:
    if actor is not None:
        tenancy.require_visible(actor, incident.workspace, via=via, what=f"incident #{incident.pk}")
        if not capabilities.may(actor, "flag", via=via):
            raise PermissionError(f"user {actor.get_username()!r} may not verify repairs (Support lead role needed)")
    if incident.status not in FINISHED or incident.finished_at is None:
        raise NotVerifiable(f"incident #{incident.pk} is {incident.status}: only a finished repair is verified")


def request_full_verification(*, incident: Incident, actor, reason: str, via: str) -> None:
    """Ask a worker for the whole-desk replay (the API and the admin: it takes as long as the desk)."""
    from repairs.tasks import verify_full_task  # the tasks call this module

    reason = validation.reason(reason)
    _allowed(incident, actor, via)
    refused = send(verify_full_task, incident.pk, actor.pk if actor is not None else None, reason, via,
                   what=f"the whole-desk replay of incident {incident.pk}")
    if refused is not None:
        raise BrokerRefused(f"could not send the whole-desk replay to a worker: {type(refused).__name__}")


def verify_full(*, incident: Incident, actor, reason: str, via: str) -> dict:
    """Replay the incident's whole desk without its flagged sources and diff; record the result on the
    incident and in its history. `actor` None: the scheduled deep check."""
    reason = validation.reason(reason)
    _allowed(incident, actor, via)
    # No repair of the workspace applies meanwhile, so the desk the replay is diffed against stands still.
    with advisory_lock(locks.WORKSPACE_REPAIRS, incident.workspace_id, wait=True):
        incident = Incident.objects.select_related("workspace").defer("plan").get(pk=incident.pk)
        _allowed(incident, None, via)
        through = Incident.objects.filter(pk=incident.pk).values_list("plan__through", flat=True).first()
        excluded = incident.excluded_sources()
        started, cost = time.monotonic(), {}
        with advisory_lock(locks.BASELINE, incident.workspace_id, wait=True):
            actions = record_baseline(workspace=incident.workspace, excluded=set(excluded), below=through, cost=cost)
            # The baseline graph now holds this replay: a repair that recorded one ahead records it again.
            Incident.objects.filter(workspace_id=incident.workspace_id).update(baseline_for=None)
            diff = diff_workspace(incident.workspace, below=through)
        result = {k: diff[k] for k in ("facts", "decisions", "effects")} | {
            "rows": diff["rows"][:MAX_ROWS], "scope": "full", "actions_rerun": actions,
            "replay_calls": cost.get("replay_calls", 0), "seconds": round(time.monotonic() - started, 3),
            "at": timezone.now().isoformat(), "by": actor.get_username() if actor is not None else "", "via": via}
        return _record(incident, result, actor=actor, reason=reason, via=via)


def _record(incident: Incident, result: dict, *, actor, reason: str, via: str) -> dict:
    differs = verification_differs(result)
    with transaction.atomic():
        incident = Incident.objects.select_for_update().defer("plan").get(pk=incident.pk)
        verification = dict(incident.verification or {})
        verification["full"] = result
        # Every replay asked for, summed (the metrics' counters): `full` holds only the last one.
        totals = verification.get("full_totals") or {"runs": 0, "actions_rerun": 0, "replay_calls": 0}
        verification["full_totals"] = {"runs": totals["runs"] + 1,
                                       "actions_rerun": totals["actions_rerun"] + result["actions_rerun"],
                                       "replay_calls": totals["replay_calls"] + result["replay_calls"]}
        if differs:
            # Any verification that differs holds the items and is said wherever the status is read.
            verification.update({k: result[k] for k in ("facts", "decisions", "effects")}, rows=result["rows"])
        Incident.objects.filter(pk=incident.pk).update(verification=verification)
        incident.verification = verification
        trail.record(action=AuditAction.VERIFICATION_FULL, subject_type="incident", subject_id=incident.pk,
                     via=via, actor=actor, reason=reason, incident_id=incident.pk, workspace=incident.workspace_id,
                     data={k: result[k] for k in ("facts", "decisions", "effects", "actions_rerun", "replay_calls",
                                                  "seconds")})
        if differs and incident.status == IncidentStatus.REPAIRED:
            transition(incident, IncidentStatus.NEEDS_ATTENTION, actor=actor, via=via,
                       reason=f"the whole-desk replay: {differs}", error=differs)
    return result


def deep_check(*, reason: str = "scheduled deep check") -> list[dict]:
    """The beat's deep check: the whole-desk replay of every workspace's latest finished repair."""
    from provenance.models import Workspace

    done = []
    for workspace in Workspace.objects.order_by("pk"):
        incident = latest_repair(workspace=workspace)
        if incident is not None:
            result = verify_full(incident=incident, actor=None, reason=reason, via=Incident.Via.WORKER)
            done.append({"incident": incident.pk, **{k: result[k] for k in ("facts", "decisions", "effects")}})
    return done
