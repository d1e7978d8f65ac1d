"""Read-side questions about compensation items and the audit trail."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, QuerySet, Sum
from django.urls import reverse

from compensation.drafting import kinds
from compensation.delivery import links
from compensation.models import QUEUE_ORDER, AuditEvent, CompensationItem, QueueTotal
from core.money import format_money
from provenance.access import tenancy
from provenance.models import Source, Workspace
from repairs.models import Incident

St, K = CompensationItem.Status, CompensationItem.Kind
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


def review_queue_url(*, incident: Incident | None = None, pending: bool = False) -> str:
    """The review queue's admin changelist, filtered to one incident (and to pending items)."""
    params = ([f"incident__id__exact={incident.pk}"] if incident is not None else []) + (
        ["status__exact=pending"] if pending else [])
    url = reverse("admin:compensation_compensationitem_changelist")
    return url + ("?" + "&".join(params) if params else "")


def cases_url(*, incident: Incident | None = None) -> str:
    """The review desk's landing: the cases that need a decision (of one incident)."""
    url = reverse("admin:compensation_compensationitem_cases")
    return url + (f"?incident={incident.pk}" if incident is not None else "")


def compensation_summary(*, incident: Incident | None, user=None) -> dict:
    """Pending review items and their total amount per currency (all incidents, or one), exact, from the
    totals the item table's triggers maintain (QueueTotal): a handful of rows instead of an aggregate
    over every pending item, with the queue's URLs. Without an incident the totals cover the workspaces
    `user` may see. `amounts` carry cents (for machines) and `text` ("$75.00", for people)."""
    per_currency = pending_totals(incident=incident, user=user)
    return {"pending": sum(r["items"] for r in per_currency),
            "amounts": [{"currency": r["currency"], "cents": r["cents"], "text": format_money(r["cents"], r["currency"])}
                        for r in per_currency],
            "url": review_queue_url(incident=incident, pending=True),
            "all_url": review_queue_url(incident=incident),
            "cases_url": cases_url(incident=incident)}


# --- one set of counts: an incident's items by kind and status ------------------------------------------------
DRAFT_KINDS = kinds.COMPENSATING  # compensate an effect that already left
HELD_KINDS = (K.REPLACEMENT_REFUND, K.REPLACEMENT_EMAIL)  # produced by the repair, held until approved


@dataclass(frozen=True)
class ItemCounts:
    """One incident's review items counted by (kind, status): what the incident page, its queue link, the
    dashboard and every report print, so they cannot disagree."""

    cells: dict[tuple[str, str], int] = field(default_factory=dict)
    pending_cents: dict[str, int] = field(default_factory=dict)  # per currency: what the pending items move
    currencies: set[str] = field(default_factory=set)  # every currency of the items

    def count(self, *, kinds=None, status: str | None = None) -> int:
        return sum(n for (k, s), n in self.cells.items()
                   if (kinds is None or k in kinds) and (status is None or s == status))

    @property
    def compensation_drafts(self) -> int:
        return self.count(kinds=DRAFT_KINDS)

    @property
    def held_replacements(self) -> int:
        return self.count(kinds=HELD_KINDS)

    @property
    def total(self) -> int:
        return self.count()

    @property
    def pending(self) -> int:
        return self.count(status=St.PENDING)

    @property
    def pending_drafts(self) -> int:
        return self.count(kinds=DRAFT_KINDS, status=St.PENDING)

    @property
    def pending_held(self) -> int:
        return self.count(kinds=HELD_KINDS, status=St.PENDING)

    @property
    def approved(self) -> int:
        return self.count(status=St.APPROVED)

    @property
    def pending_amounts(self) -> list[dict]:
        """[{"currency": "USD", "cents": 40000, "text": "$400.00"}], currencies with money pending only."""
        return [{"currency": c, "cents": n, "text": format_money(n, c)}
                for c, n in sorted(self.pending_cents.items()) if n]

    @property
    def sentence(self) -> str:
        """"10 compensation drafts + 0 held replacements = 10 items"."""
        def n(count: int, word: str) -> str:
            return f"{count} {word}" + ("" if count == 1 else "s")
        return (f"{n(self.compensation_drafts, 'compensation draft')} + "
                f"{n(self.held_replacements, 'held replacement')} = {n(self.total, 'item')}")

    def as_dict(self) -> dict:
        """The report's shape: totals, then {kind: {status: n}} with every kind and status named."""
        return {"compensation_drafts": self.compensation_drafts, "held_replacements": self.held_replacements,
                "total": self.total, "pending": self.pending,
                "pending_amounts": [{"currency": a["currency"], "amount_cents": a["cents"], "amount": a["text"]}
                                    for a in self.pending_amounts],
                "by_status": {s: self.count(status=s) for s in St.values},
                "by_kind": {k: {s: self.cells.get((k, s), 0) for s in St.values} for k in K.values}}


def item_counts_by_incident(*, incident_ids) -> dict[int, ItemCounts]:
    """ItemCounts of each incident, with the money its pending items move, in one grouped query over those
    incidents' items (through the index that leads with the incident). Limits: it reads every item of the
    incidents asked for, so callers ask for one incident or a page of them, never the whole queue
    (QueueTotal answers that)."""
    counts = {pk: ItemCounts() for pk in incident_ids}
    rows = (CompensationItem.objects.filter(incident_id__in=list(counts)).order_by()
            # Count("kind"), not the pk: every column is then in compensation_case_key, an index-only scan
            # instead of reading each wide item row.
            .values_list("incident_id", "kind", "status", "currency").annotate(n=Count("kind"), cents=Sum("amount_cents")))
    for incident_id, kind, status, currency, n, cents in rows:
        c = counts[incident_id]
        c.currencies.add(currency)
        c.cells[(kind, status)] = c.cells.get((kind, status), 0) + n
        if status == St.PENDING and kind in kinds.MONEY:
            c.pending_cents[currency] = c.pending_cents.get(currency, 0) + (cents or 0)
    return counts


def item_counts(*, incident: Incident) -> ItemCounts:
    """One incident's items by kind and status (see item_counts_by_incident)."""
    return item_counts_by_incident(incident_ids=[incident.pk])[incident.pk]


def compensation_items(*, incident: Incident) -> list[dict]:
    """Every compensation item of `incident` with its decision, delivery and audit history (for the
    report), in two queries whatever the number of items (and one per kind not yet tried)."""
    from core.audit.export import export_row
    from compensation.review.edits import edit_diffs

    from compensation.delivery.delivery_selectors import report_line

    items = list(CompensationItem.objects.filter(incident=incident).select_related("decided_by", "delivery")
                 .order_by("pk"))
    for i in items:
        i.incident = incident  # the report's connector lookups need the workspace, not a query per item
    chosen: dict[str, str] = {}
    diffs = edit_diffs(items)
    history: dict[str, list[dict]] = defaultdict(list)
    for event in AuditEvent.objects.filter(subject_type="compensation_item",
                                           subject_id__in=[str(i.pk) for i in items]).order_by("seq"):
        history[event.subject_id].append(export_row(event))
    return [{
        "id": i.pk, "kind": i.kind, "kind_label": i.get_kind_display(), "ticket": i.ticket_id, "status": i.status,
        "amount_cents": i.amount_cents, "currency": i.currency, "amount": i.amount_display,
        "to": i.to, "subject": i.subject, "body": i.body,
        "valid": i.valid, "problems": i.problems, "drafted_by": i.drafted_by,
        "decided_by": i.decided_by.get_username() if i.decided_by else None,
        "decided_at": i.decided_at.isoformat() if i.decided_at else None, "decision_reason": i.decision_reason,
        "executed_at": i.executed_at.isoformat() if i.executed_at else None, "history": history[str(i.pk)],
        # An edited item: each field as drafted and as approved (compensation.review.edits).
        "edit": [{**e.as_dict(), "label": e.label, "pieces": e.pieces} for e in diffs.get(i.pk, [])],
        # Where it went: state, connector, the provider's reference and how many tries (None before approval).
        "delivery": report_line(i, chosen),
    } for i in items]


def queue_rows(*, workspace: Workspace) -> list[dict]:
    """The `review_queue --json` shape. `amount` is integer cents; `valid` is true when the draft passed
    validation (approvable = pending and valid); `compensates` is the REST API's list of the effects the
    item compensates (compensation.delivery.links)."""
    items = list(review_queue(workspace=workspace))
    compensated = links.compensates(items)
    return [{"id": i.pk, "incident": i.incident_id, "kind": i.kind, "ticket": i.ticket_id, "amount": i.amount_cents,
             "status": i.status, "valid": i.valid, "compensates": compensated[i.pk]} for i in items]


def money_totals(items) -> dict[str, int]:
    """Cents per currency that executing these items would move (emails move none)."""
    totals: dict[str, int] = defaultdict(int)
    for item in items:
        if item.moves_money:
            totals[item.currency] += item.amount_cents
    return dict(sorted(totals.items()))


def item_history(*, item: CompensationItem) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(subject_type="compensation_item", subject_id=str(item.pk)).order_by("seq")


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
    return tenancy.scoped(AuditEvent.objects.all(), user=user)


def visible_chains(*, user) -> list[int | None]:
    """The chains (workspace ids, None: the system chain) whose status `user` may see, of those in use."""
    from core.audit.verification import chains_in_use

    in_use = chains_in_use()
    if tenancy.sees_every_workspace(user):
        return in_use
    mine = set(tenancy.visible_workspaces(user=user).values_list("pk", flat=True))
    return [ws for ws in in_use if ws is not None and ws in mine]
