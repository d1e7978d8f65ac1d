"""Who works which case: assigning cases to reviewers, claiming them, and the counts per reviewer.

A case may be assigned only to an active Reviewer who may see its workspace, by a Reviewer of that
workspace (a claim is an assignment to oneself). Every assignment is audited in its transaction.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q

from core.audit import trail
from core.wording import counted
from core.vocabulary import AuditAction
from compensation.models import CaseAssignment, CompensationItem
from compensation.review.services import REVIEW_PERMISSION, ReviewRefused
from provenance.access import tenancy
from repairs.models import Incident

St = CompensationItem.Status


def assignee_filter(value: str, *, actor, incident=None) -> Q:
    """Items of cases assigned to `value`: "me" (the actor), "none" (unassigned) or a username. Within
    one `incident`, an uncorrelated list of its assigned tickets (read once, not probed per item)."""
    username = actor.get_username() if value == "me" and actor is not None else value
    if incident is not None:
        assigned = CaseAssignment.objects.filter(incident=incident).order_by()
        if value == "none":
            return ~Q(ticket_id__in=assigned.values("ticket_id"))
        return Q(ticket_id__in=assigned.filter(assignee__username=username).values("ticket_id"))
    assigned = CaseAssignment.objects.filter(incident_id=OuterRef("incident_id"), ticket_id=OuterRef("ticket_id"))
    if value == "none":
        return ~Q(Exists(assigned))
    return Q(Exists(assigned.filter(assignee__username=username)))


def _check_reviewer(user, workspace_id: int, *, who: str) -> None:
    if user is None or not user.is_active or not user.has_perm(REVIEW_PERMISSION):
        raise ReviewRefused(f"{who} must be an active Reviewer")
    if not tenancy.may_see(user, workspace_id):
        raise ReviewRefused(f"{who} {user.get_username()!r} is not a member of this case's workspace")


def assign(*, keys: list[tuple[int, str]], assignee, actor, reason: str, via: str) -> int:
    """Assign the cases `keys` (incident id, ticket) to `assignee` (None: unassign). Returns how many
    changed. Cases the actor may not see are refused like missing ones."""
    return _assign(keys=keys, assignee=assignee, actor=actor, reason=reason, via=via, keep_others=False)[0]


def claim(*, keys: list[tuple[int, str]], actor, reason: str, via: str) -> tuple[int, dict[tuple[int, str], str]]:
    """Assign to `actor` those of `keys` that nobody else holds. Returns how many were claimed and the
    cases another reviewer holds (key: their username), which stay theirs: two reviewers who tick the
    same unassigned cases on lists loaded at the same moment each keep what they claimed first."""
    return _assign(keys=keys, assignee=actor, actor=actor, reason=reason, via=via, keep_others=True)


def _assign(*, keys, assignee, actor, reason: str, via: str, keep_others: bool) -> tuple[int, dict]:
    """assign(); with `keep_others`, a case assigned to someone else is left to them and returned. The
    current assignee is read under the workspace's audit lock, so a claim made at the same moment is seen."""
    incidents = {i.pk: i for i in tenancy.scoped(Incident.objects.defer("plan", "verification"), user=actor)
                 .filter(pk__in={k[0] for k in keys})}
    if any(k[0] not in incidents for k in keys):
        raise tenancy.NotVisible("no such case")
    changed, held = 0, {}
    with transaction.atomic():
        for incident_id, ticket in keys:
            incident = incidents[incident_id]
            _check_reviewer(actor, incident.workspace_id, who="the person assigning")
            if assignee is not None:
                _check_reviewer(assignee, incident.workspace_id, who="the assignee")
            if not CompensationItem.objects.filter(incident_id=incident_id, ticket_id=ticket).exists():
                raise tenancy.NotVisible(f"no case {incident_id}/{ticket}")
            trail.lock_chain(incident.workspace_id)
            current = CaseAssignment.objects.select_for_update().filter(incident_id=incident_id, ticket_id=ticket).first()
            before = current.assignee.get_username() if current else ""
            after = assignee.get_username() if assignee is not None else ""
            if before == after:
                continue
            if keep_others and before:
                held[(incident_id, ticket)] = before
                continue
            if assignee is None:
                current.delete()
            else:
                CaseAssignment.objects.update_or_create(incident_id=incident_id, ticket_id=ticket,
                                                        defaults={"assignee": assignee, "assigned_by": actor})
            trail.record(action=AuditAction.CASE_ASSIGNED, subject_type="case", subject_id=f"{incident_id}/{ticket}", via=via,
                         actor=actor, reason=reason, incident_id=incident_id, workspace=incident.workspace_id,
                         from_status=before, to_status=after, data={"ticket": ticket})
            changed += 1
    return changed, held


def assignees(*, keys: list[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """The username each of `keys` is assigned to (unassigned cases left out)."""
    if not keys:
        return {}
    wanted = set(keys)
    # incident IN … AND ticket IN … (the assignment key's index), the exact pairs kept here: an OR of 50
    # pairs cost more to build and plan than to read.
    rows = CaseAssignment.objects.filter(incident_id__in={k[0] for k in keys}, ticket_id__in={k[1] for k in keys})
    return {(i, t): u for i, t, u in rows.values_list("incident_id", "ticket_id", "assignee__username")
            if (i, t) in wanted}


def workload(*, incident, cases_pending: int | None = None) -> list[dict]:
    """Each reviewer's cases on `incident` that still need a decision, and the unassigned ones.
    `cases_pending`: how many cases need a decision, when the caller has counted them already."""
    pending = CompensationItem.objects.filter(incident=incident, status=St.PENDING)
    open_cases = CaseAssignment.objects.filter(incident=incident).filter(
        Exists(pending.filter(ticket_id=OuterRef("ticket_id"))))
    rows = [{"reviewer": r["assignee__username"], "cases": r["n"]}
            for r in open_cases.values("assignee__username").annotate(n=Count("id")).order_by("assignee__username")]
    total = cases_pending if cases_pending is not None else pending.order_by().values("ticket_id").distinct().count()
    rows.append({"reviewer": "", "cases": total - sum(r["cases"] for r in rows)})
    return rows


def reviewers(*, incident) -> list:
    """Who a case of `incident` may be assigned to."""
    app, codename = REVIEW_PERMISSION.split(".")
    may = (Q(groups__permissions__codename=codename, groups__permissions__content_type__app_label=app)
           | Q(user_permissions__codename=codename, user_permissions__content_type__app_label=app) | Q(is_superuser=True))
    return list(get_user_model().objects.filter(may, is_active=True, workspaces=incident.workspace_id)
                .distinct().order_by("username")[:200])


MAX_BATCH = 500  # cases one request hands out


@dataclass
class Batch:
    """What "give me the next N" handed out: the tickets now the reviewer's, and, when none, why."""

    incident_id: int
    tickets: list[str] = field(default_factory=list)
    why_none: str = ""
    left_in_batch: int = 0  # the reviewer's own cases on the incident that still need a decision
    left_in_incident: int = 0  # every case of the incident that still needs a decision

    @property
    def count(self) -> int:
        return len(self.tickets)


def next_batch(*, incident, actor, count: int, reason: str, via: str) -> Batch:
    """Assign to `actor` the next `count` cases of `incident` that need a decision and nobody holds, in
    desk order. The unassigned cases are read and taken under the workspace's audit lock, so reviewers who
    ask at the same moment get disjoint batches, one after the other. A batch of none says why."""
    if not 1 <= count <= MAX_BATCH:
        raise ReviewRefused(f"ask for between 1 and {MAX_BATCH} cases")
    incident = tenancy.scoped(Incident.objects.defer("plan", "verification"), user=actor).filter(pk=incident.pk).first()
    if incident is None:
        raise tenancy.NotVisible("no such incident")
    _check_reviewer(actor, incident.workspace_id, who="you")
    batch = Batch(incident_id=incident.pk)
    pending = CompensationItem.objects.filter(incident=incident, status=St.PENDING).order_by()
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)
        if incident.flagged_by_id == actor.pk and settings.KINTSUGI_FOUR_EYES:
            batch.why_none = (f"you flagged incident #{incident.pk}: four-eyes keeps its cases for other reviewers")
        else:
            held = CaseAssignment.objects.filter(incident=incident).values("ticket_id")
            batch.tickets = list(pending.exclude(ticket_id__in=held).values_list("ticket_id", flat=True)
                                 .distinct().order_by("ticket_id")[:count])
        # One INSERT and one append for the batch: the chain's lock is held for two statements, not two per case.
        CaseAssignment.objects.bulk_create([CaseAssignment(incident=incident, ticket_id=ticket, assignee=actor,
                                                           assigned_by=actor) for ticket in batch.tickets])
        trail.record_many([dict(action=AuditAction.CASE_ASSIGNED, subject_type="case",
                                subject_id=f"{incident.pk}/{ticket}", via=via, actor=actor,
                                reason=reason or "next cases", incident_id=incident.pk, from_status="",
                                to_status=actor.get_username(), data={"ticket": ticket, "batch": count})
                           for ticket in batch.tickets], workspace=incident.workspace_id)
    batch.left_in_batch = left_in_batch(incident=incident, user=actor)
    batch.left_in_incident = pending.values("ticket_id").distinct().count()
    if not batch.tickets and not batch.why_none:
        if not batch.left_in_incident:
            batch.why_none = f"no case of incident #{incident.pk} needs a decision any more"
        else:
            others = [w for w in workload(incident=incident, cases_pending=batch.left_in_incident) if w["reviewer"]]
            batch.why_none = ("every case that needs a decision is already with a reviewer ("
                              + ", ".join(f"{w['reviewer']} {w['cases']:,}" for w in others) + ")")
    return batch


def left_in_batch(*, incident, user) -> int:
    """How many of `user`'s cases on `incident` still need a decision."""
    pending = CompensationItem.objects.filter(incident=incident, status=St.PENDING, ticket_id=OuterRef("ticket_id"))
    return CaseAssignment.objects.filter(incident=incident, assignee=user).filter(Exists(pending)).count()


def batch_message(batch: Batch) -> str:
    """The sentence a person reads after asking for cases."""
    if not batch.count:
        return f"No cases given to you: {batch.why_none}."
    return (f"{counted(batch.count, 'case')} given to you. {batch.left_in_batch:,} left in your batch, "
            f"{batch.left_in_incident:,} left in the incident.")
