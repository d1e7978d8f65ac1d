"""Read-side questions about compensation items and the audit trail."""
from __future__ import annotations

from collections import defaultdict

from django.db.models import Q, QuerySet, Sum

from compensation.models import QUEUE_ORDER, AuditEvent, CompensationItem, QueueTotal
from provenance import tenancy
from provenance.models import Source, Workspace
from repairs.models import Incident

St = CompensationItem.Status
STATUS_ORDER = QUEUE_ORDER  # pending first, then approved, then decided


def review_queue(*, workspace: Workspace | None = None, incident: Incident | None = None) -> QuerySet[CompensationItem]:
    """Items, pending first (then approved-awaiting-execution, then decided), newest incident first."""
    # The incident's repair plan and verification rows can be megabytes: never load them per item.
    qs = (CompensationItem.objects.select_related("incident__workspace", "decided_by")
          .defer("incident__plan", "incident__verification").annotate(status_order=STATUS_ORDER))
    if workspace is not None:
        qs = qs.filter(incident__workspace=workspace)
    if incident is not None:
        qs = qs.filter(incident=incident)
    return qs.order_by(QUEUE_ORDER, "-incident_id", "ticket_id", "kind", "pk")


def queue_count(*, user, status: str | None = None, incident_id: int | None = None) -> int:
    """How many items (with this status, on this incident) of the workspaces `user` may see, exact, from
    the trigger-maintained totals: a few rows whatever the size of the queue."""
    totals = tenancy.scoped(QueueTotal.objects.all(), user=user, path="incident__workspace")
    if status is not None:
        totals = totals.filter(status=status)
    if incident_id is not None:
        totals = totals.filter(incident_id=incident_id)
    return totals.aggregate(n=Sum("items"))["n"] or 0


def pending_totals(*, incident: Incident | None = None, user=None) -> list[dict]:
    """Pending items and their cents per currency (one incident, or every incident `user` may see),
    exact, from the maintained totals: [{"currency": "USD", "items": 66779, "cents": 123400}], currencies
    with pending items only."""
    totals = QueueTotal.objects.filter(status=St.PENDING)
    if incident is not None:
        totals = totals.filter(incident=incident)
    else:
        totals = tenancy.scoped(totals, user=user, path="incident__workspace")
    return list(totals.values("currency").annotate(items=Sum("items"), cents=Sum("cents"))
                .filter(items__gt=0).order_by("currency"))


def queue_rows(*, workspace: Workspace) -> list[dict]:
    """The `review_queue --json` shape. `amount` is integer cents; `valid` is true when the draft passed
    validation (approvable = pending and valid)."""
    return [{"id": i.pk, "incident": i.incident_id, "kind": i.kind, "ticket": i.ticket_id, "amount": i.amount_cents,
             "status": i.status, "valid": i.valid} for i in review_queue(workspace=workspace)]


def money_totals(items) -> dict[str, int]:
    """Cents per currency that executing these items would move (emails move none)."""
    totals: dict[str, int] = defaultdict(int)
    for item in items:
        if item.moves_money:
            totals[item.currency] += item.amount_cents
    return dict(sorted(totals.items()))


def item_history(*, item: CompensationItem) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(subject_type="compensation_item", subject_id=str(item.pk)).order_by("seq")


def incident_history(*, incident: Incident) -> QuerySet[AuditEvent]:
    """The incident's own transitions and every event of its items."""
    return AuditEvent.objects.filter(Q(incident_id=incident.pk) | Q(subject_type="incident", subject_id=str(incident.pk))
                                     ).order_by("seq")


def flagged_source(*, item: CompensationItem) -> Source | None:
    return Source.objects.filter(workspace_id=item.incident.workspace_id, source_id=item.incident.source_id).first()


def path_text(steps: list[dict]) -> str:
    """One line for a path: `source → research #3 (poisoned) → …` (plain text; templates escape it)."""
    parts = []
    for s in steps:
        label = s["label"] + (f" [{s['status']}]" if s.get("status") else "")
        parts.append(f"—{s['edge']}→ {label}" if s.get("edge") else label)
    return " ".join(parts)


def visible_audit_events(*, user) -> QuerySet[AuditEvent]:
    """The audit rows `user` may read: their workspaces' chains; superusers every chain, the system
    chain (users, memberships) and those of deleted workspaces included."""
    from provenance.tenancy import visible_workspaces

    if user is not None and user.is_active and user.is_superuser:
        return AuditEvent.objects.all()
    return AuditEvent.objects.filter(workspace__in=visible_workspaces(user=user))


def visible_chains(*, user) -> list[int | None]:
    """The chains (workspace ids, None: the system chain) whose status `user` may see, of those in use."""
    from compensation.chains import chains_in_use
    from provenance.tenancy import visible_workspaces

    in_use = chains_in_use()
    if user is not None and user.is_active and user.is_superuser:
        return in_use
    mine = set(visible_workspaces(user=user).values_list("pk", flat=True))
    return [ws for ws in in_use if ws is not None and ws in mine]
