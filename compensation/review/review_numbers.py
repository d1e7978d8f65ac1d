"""What still waits for a person on an incident, in one set of numbers and one set of words.

The incident list, the incident page, the dashboard, the case list, the API and the reports all print
these (built on compensation.review.selectors.ItemCounts), so a repaired incident whose items wait reads
"Needs review · 10 · $400.00" everywhere and never "repaired" alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q

from compensation.models import CompensationItem
from compensation.review.selectors import ItemCounts, item_counts_by_incident
from core.money import format_money, format_totals
from core.vocabulary import IncidentStatus

St = CompensationItem.Status


@dataclass(frozen=True)
class Review:
    items_pending: int = 0
    cases_pending: int = 0
    cases: int = 0
    pending_cents: dict = field(default_factory=dict)  # per currency

    @property
    def amount_pending_cents(self) -> int:
        return sum(self.pending_cents.values())

    @property
    def cases_decided(self) -> int:
        return self.cases - self.cases_pending

    @property
    def money(self) -> str:
        return format_totals({c: n for c, n in sorted(self.pending_cents.items()) if n}, empty=format_money(0, "USD"))

    @property
    def text(self) -> str:
        """"Needs review · 10 · $400.00" while items wait; "" when nothing does."""
        if not self.items_pending:
            return ""
        return f"Needs review · {self.items_pending} · {self.money}"

    def as_dict(self) -> dict:
        return {"items_pending": self.items_pending, "amount_pending_cents": self.amount_pending_cents,
                "cases_pending": self.cases_pending}


def from_counts(counts: ItemCounts, *, cases_pending: int = 0, cases: int = 0) -> Review:
    """From ItemCounts (and case counts) the caller already read, without a query; without the case
    counts, items and money only: what a status line needs."""
    return _from(counts, cases_pending, cases)


def _from(counts: ItemCounts, cases_pending: int, cases: int) -> Review:
    return Review(items_pending=counts.pending, cases_pending=cases_pending, cases=cases,
                  pending_cents=dict(counts.pending_cents))


def review_by_incident(*, incident_ids, counts: dict[int, ItemCounts] | None = None) -> dict[int, Review]:
    """Review of each incident asked for: two grouped queries over their items (a page of incidents), one
    when the caller already read their ItemCounts."""
    ids = list(incident_ids)
    counts = counts if counts is not None else item_counts_by_incident(incident_ids=ids)
    cases = {r["incident_id"]: r for r in CompensationItem.objects.filter(incident_id__in=ids).order_by()
             .values("incident_id").annotate(n=Count("ticket_id", distinct=True),
                                             pending=Count("ticket_id", distinct=True, filter=Q(status=St.PENDING)))}
    return {pk: _from(counts[pk], cases.get(pk, {}).get("pending", 0), cases.get(pk, {}).get("n", 0)) for pk in ids}


def review(*, incident, counts: ItemCounts | None = None) -> Review:
    """One incident's review. With `counts` (its ItemCounts, already read by the caller) only the
    items and money are filled, without another query: what a status line needs."""
    if counts is not None:
        return from_counts(counts)
    return review_by_incident(incident_ids=[incident.pk])[incident.pk]


def status_text(incident, found: Review) -> str:
    """The incident's status as a person should read it: a repaired incident with items waiting needs review."""
    if found.items_pending and incident.status in (IncidentStatus.REPAIRED, IncidentStatus.REPAIRING):
        return found.text if incident.status == IncidentStatus.REPAIRED else f"{incident.get_status_display()} · {found.text}"
    return incident.get_status_display()
