"""What a lead and a reviewer read first about each incident: the money paid wrongly, what is left to
recover and what came back, the cases decided, who reviews them, and the reviewer's inbox.

Each function answers a page of incidents (the dashboard's ten, the inbox's fifty) in one grouped query;
none counts over the whole queue.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Exists, OuterRef, Q, Sum

from compensation.drafting import kinds
from compensation.models import CaseAssignment, CompensationItem
from core.money import format_totals
from core.vocabulary import IncidentStatus
from provenance.access import tenancy

K, St = CompensationItem.Kind, CompensationItem.Status
TO_RECOVER = (St.PENDING, St.APPROVED)  # asked back, or still to be asked back once approved
INBOX_LIMIT = 50


@dataclass
class Recovery:
    """One incident's reversals, per currency: what was paid wrongly, what is still to recover, what came
    back, and what reviewers decided not to ask back."""

    wrongly_paid: dict[str, int] = field(default_factory=dict)
    to_recover: dict[str, int] = field(default_factory=dict)
    recovered: dict[str, int] = field(default_factory=dict)
    not_asked: dict[str, int] = field(default_factory=dict)

    @property
    def shown(self) -> dict[str, str]:
        """Each figure in words ("$750.00", "nothing"), for the pages."""
        return {name: format_totals({c: n for c, n in sorted(getattr(self, name).items()) if n}, empty="nothing")
                for name in ("wrongly_paid", "to_recover", "recovered", "not_asked")}

    @property
    def waiting(self) -> bool:
        return any(self.to_recover.values())


def recovery_by_incident(*, incident_ids) -> dict[int, Recovery]:
    """Recovery of each incident asked for: one grouped query over their refund reversals."""
    found = {pk: Recovery() for pk in incident_ids}
    rows = (CompensationItem.objects.filter(incident_id__in=list(found), kind=K.REFUND_REVERSAL).order_by()
            .values_list("incident_id", "status", "currency").annotate(cents=Sum("amount_cents")))
    for incident_id, status, currency, cents in rows:
        r, cents = found[incident_id], cents or 0
        r.wrongly_paid[currency] = r.wrongly_paid.get(currency, 0) + cents
        bucket = (r.to_recover if status in TO_RECOVER else r.recovered if status == St.EXECUTED else r.not_asked)
        bucket[currency] = bucket.get(currency, 0) + cents
    return found


def reviewers_by_incident(*, incident_ids) -> dict[int, list[str]]:
    """The people who hold cases of each incident (by username), in one query."""
    found: dict[int, list[str]] = {pk: [] for pk in incident_ids}
    rows = (CaseAssignment.objects.filter(incident_id__in=list(found)).order_by("assignee__username")
            .values_list("incident_id", "assignee__username").distinct())
    for incident_id, username in rows:
        found[incident_id].append(username)
    return found


@dataclass
class InboxRow:
    incident: object
    cases: int
    cases_pending: int
    mine_pending: int
    pending_cents: dict[str, int]

    @property
    def money(self) -> str:
        return format_totals({c: n for c, n in sorted(self.pending_cents.items()) if n}, empty="no money")


def inbox(*, user, limit: int = INBOX_LIMIT) -> list[InboxRow]:
    """A reviewer's incidents with cases still to decide: those holding cases of theirs first, then the
    others, newest first; each with the lead's reason (incident.reason). Open incidents only."""
    from repairs.models import Incident

    incidents = list(tenancy.scoped(Incident.objects.all(), user=user).exclude(status=IncidentStatus.CLOSED)
                     .filter(compensation_items__status=St.PENDING).distinct()
                     .select_related("workspace", "flagged_by").defer("plan", "verification", "counts")
                     .order_by("-created_at")[:limit])
    ids = [i.pk for i in incidents]
    cases = {r["incident_id"]: r for r in CompensationItem.objects.filter(incident_id__in=ids).order_by()
             .values("incident_id").annotate(n=Count("ticket_id", distinct=True),
                                             pending=Count("ticket_id", distinct=True, filter=Q(status=St.PENDING)))}
    money: dict[int, dict[str, int]] = {pk: {} for pk in ids}
    for incident_id, currency, cents in (CompensationItem.objects.filter(
            incident_id__in=ids, status=St.PENDING, kind__in=kinds.MONEY).order_by()
            .values_list("incident_id", "currency").annotate(cents=Sum("amount_cents"))):
        money[incident_id][currency] = cents or 0
    pending = CompensationItem.objects.filter(incident_id=OuterRef("incident_id"), ticket_id=OuterRef("ticket_id"),
                                              status=St.PENDING)
    mine = dict(CaseAssignment.objects.filter(incident_id__in=ids, assignee=user).filter(Exists(pending)).order_by()
                .values("incident_id").annotate(n=Count("id")).values_list("incident_id", "n"))
    rows = [InboxRow(incident=i, cases=cases.get(i.pk, {}).get("n", 0),
                     cases_pending=cases.get(i.pk, {}).get("pending", 0), mine_pending=mine.get(i.pk, 0),
                     pending_cents=money[i.pk]) for i in incidents]
    rows.sort(key=lambda r: (r.mine_pending == 0, -r.incident.created_at.timestamp()))
    return rows
