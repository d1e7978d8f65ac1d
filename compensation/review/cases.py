"""The reviewer's desk by case: one ticket of one incident, with everything that would leave for it.

A case holds the ticket's items (its reversal, its correction email, its held replacements) in the order
they would leave the building, the money at stake, and one sentence of what happened, built from the
ticket's triage decision before and after the repair and the items' netting facts. Cases that need a
decision come first, then those whose approved items still wait to go out, then the decided ones.

Limits: without an incident, the cases of the `INCIDENT_LIMIT` newest incidents that still have pending
items (every item of those incidents is read; the per-item changelist serves search over everything).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Q
from django.urls import reverse
from django.utils.functional import cached_property

from compensation.delivery import gates, messages, sequencing

from compensation.drafting import kinds
from compensation.delivery_models import Delivery, delivery_needs_person
from compensation.review.edits import edit_diffs
from compensation.models import CompensationItem
from core.money import format_money
from core.vocabulary import ItemStatus
from provenance.access import tenancy
from repairs import ticket_story
from repairs.models import ActionOutcome, Incident
from repairs.wording import describe

K, St = CompensationItem.Kind, CompensationItem.Status
INCIDENT_LIMIT = 20
GONE = (St.REJECTED, St.CANCELLED)


class CaseState:
    DELIVERY_FAILED = "delivery failed: a person decides"  # a provider refused after the approval
    NEEDS_DECISION = "needs decision"
    WAITING = "approved, waiting to go out"
    DONE = "done"  # what was approved has gone out
    REJECTED = "rejected, nothing sent"  # every item rejected or cancelled


STATE_RANK = {CaseState.DELIVERY_FAILED: 0, CaseState.NEEDS_DECISION: 0, CaseState.WAITING: 1, CaseState.DONE: 2,
              CaseState.REJECTED: 2}


@dataclass
class CaseItem:
    """One item of a case, with what the ordering rule says about it."""

    item: CompensationItem
    waits_for: CompensationItem | None = None  # approved, held until this money item is approved
    refused_money: CompensationItem | None = None  # the money item it explains was rejected
    edits: list = field(default_factory=list)  # compensation.review.edits.FieldEdit rows, when a reviewer edited it

    @property
    def undoable(self) -> bool:
        """Decided within the undo window (compensation.delivery.approval): its author may still take it back."""
        from compensation.delivery.approval import in_undo_window

        return self.item.status in (St.APPROVED, St.REJECTED) and in_undo_window(self.item)

    @property
    def delivery(self):
        """Its Delivery (read with the item), None before its first try."""
        try:
            return self.item.delivery
        except Delivery.DoesNotExist:
            return None

    @property
    def held(self) -> bool:
        return self.item.status == St.APPROVED and self.waits_for is not None

    @property
    def note(self) -> str:
        """What the reviewer must know about this item beyond its status (plain text)."""
        if self.refused_money is not None and self.item.status in (St.PENDING, St.APPROVED):
            return (f"its {self.refused_money.get_kind_display()} #{self.refused_money.pk} was rejected: "
                    + ("this email stays held" if self.item.status == St.APPROVED
                       else "reject this email, or edit it so it stands alone"))
        if self.item.status == St.APPROVED:
            held = gates.execution_wait(self.item.incident)
            if held is not None:
                return held
        if self.waits_for is not None and self.item.status in (St.PENDING, St.APPROVED):
            verb = "waits for" if self.item.status == St.APPROVED else "will wait for"
            return f"{verb} the {self.waits_for.get_kind_display()} #{self.waits_for.pk} to be approved"
        return ""

    @cached_property
    def message(self) -> messages.Message | None:
        """The message this item sends, as sent (None for a manual compensation: nothing leaves)."""
        return None if self.item.kind == K.MANUAL_COMPENSATION else messages.message(self.item)

    @property
    def shown(self) -> str:
        """The content hash a decision taken from this page is bound to."""
        return self.message.content_hash if self.message else messages.content_hash(self.item)

    @property
    def leaves_as(self) -> str:
        """What executing this item sends out of the building (plain text)."""
        i = self.item
        if i.kind == K.REFUND_REVERSAL:
            return f"a reversal request of {i.amount_display} to payments (reference {i.payment_reference})"
        if i.kind == K.REPLACEMENT_REFUND:
            return f"a refund of {i.amount_display} to {i.customer_email}"
        if i.kind == K.MANUAL_COMPENSATION:
            effect = i.original[0] if i.original else {"kind": "effect"}
            amount = f" of {i.amount_display}" if i.amount_cents else ""
            return f"nothing through kintsugi: a person compensates the {effect['kind']}{amount} by hand"
        tickets = sequencing.grouped_tickets(i)
        return f"an email to {i.customer_email}: {i.subject}" + (
            f" (one message for tickets {', '.join(tickets)})" if tickets else "")


@dataclass
class Case:
    incident_id: int
    ticket: str
    customer: str
    customer_email: str
    currency: str
    summary: str
    items: list[CaseItem] = field(default_factory=list)
    story: object | None = None  # repairs.ticket_story.TicketStory, loaded for one case's page
    # The customer's one message about several tickets, when it is reviewed on another ticket's case
    # (compensation.drafting.grouping: it lives on the customer's first ticket).
    message_elsewhere: list[CompensationItem] = field(default_factory=list)

    @property
    def elsewhere(self) -> list[tuple[CompensationItem, str]]:
        """(message, the case page that shows it) for each such message."""
        return [(m, reverse("admin:compensation_compensationitem_case", args=[m.incident_id, m.ticket_id]))
                for m in self.message_elsewhere]

    @property
    def key(self) -> tuple[int, str]:
        return (self.incident_id, self.ticket)

    @property
    def pending(self) -> list[CaseItem]:
        return [c for c in self.items if c.item.status == St.PENDING]

    @property
    def approvable(self) -> list[CaseItem]:
        return [c for c in self.pending if c.item.valid]

    @property
    def state(self) -> str:
        if any(delivery_needs_person(c.item) for c in self.items):
            return CaseState.DELIVERY_FAILED
        if self.pending:
            return CaseState.NEEDS_DECISION
        if any(c.item.status == St.APPROVED for c in self.items):
            return CaseState.WAITING
        if all(c.item.status in GONE for c in self.items):
            return CaseState.REJECTED
        return CaseState.DONE

    @property
    def at_stake_cents(self) -> int:
        """Money the case's items move unless rejected."""
        return sum(c.item.amount_cents for c in self.items if c.item.moves_money and c.item.status not in GONE)

    @property
    def at_stake(self) -> str:
        return format_money(self.at_stake_cents, self.currency)

    @property
    def shown_digest(self) -> str:
        """What a page showing this case's pending items binds its "approve the case" to."""
        return messages.shown_digest([c.item for c in self.pending])

    @property
    def leaving(self) -> list[CaseItem]:
        """What approving every pending item would send out, in the order it leaves (approved items not
        yet executed included): money first, the email that explains it only after it."""
        return [c for c in self.items if c.item.status in (St.PENDING, St.APPROVED)
                and not (c.item.status == St.PENDING and not c.item.valid) and c.refused_money is None]

    @cached_property
    def url(self) -> str:
        # Cached: its key never changes, and a list prints it twice per row (a reverse() each).
        return reverse("admin:compensation_compensationitem_case", args=[self.incident_id, self.ticket])


def _sentence(items: list[CompensationItem], triage: dict, currency: str) -> str:
    """"Refunded $120.00 in full under the flagged rule; under the clean policy: reply, no refund"."""
    manual = [e for i in items if i.kind == K.MANUAL_COMPENSATION for e in i.original]
    if manual and all(i.kind == K.MANUAL_COMPENSATION for i in items):
        what = ", ".join(f"a {e['kind']}" + (f" of {format_money(e['amount_cents'], e['currency'])}"
                                             if e.get("amount_cents") else "") for e in manual)
        return f"Recorded {what} under the flagged rule; kintsugi cannot undo it: a person compensates it by hand"
    facts = next((i.facts for i in items if i.facts.get("refunded_cents") or i.facts.get("replacement_cents")),
                 items[0].facts)
    before, after = triage.get("before") or {}, triage.get("after") or {}
    refunded, kept, paid = (facts.get(k) or 0 for k in ("refunded_cents", "replacement_cents", "paid_cents"))
    if refunded:
        then = f"Refunded {format_money(refunded, currency)}" + (
            " in full" if refunded == paid else f" of {format_money(paid, currency)}" if paid else "")
    elif before.get("choice"):
        then = f"Decided {before['choice']}" + (f" ({before['level']})" if before.get("level") not in (None, "none") else "")
    else:
        then = f"Sent {describe(before, currency=currency)}" if before else "Acted"
    if kept:
        now = (f"{after.get('level', '')} refund of {format_money(kept, currency)}".strip()
               if after.get("level") not in (None, "full") else f"refund {format_money(kept, currency)}")
    elif after.get("choice"):
        now = f"{after['choice']}, no refund"
    else:
        now = "no refund, no message" if not any(i.kind == K.REPLACEMENT_EMAIL for i in items) else "no refund"
    return f"{then} under the flagged rule; under the clean policy: {now}"


def _triage(incident_ids, tickets) -> dict[tuple[int, str], dict]:
    """The ticket's triage decision before and after the repair (its first decision with a choice)."""
    found: dict[tuple[int, str], dict] = {}
    rows = (ActionOutcome.objects.filter(incident_id__in=incident_ids, ticket__in=tickets, agent="triage")
            .order_by("incident_id", "ticket", "seq").values_list("incident_id", "ticket", "before", "after"))
    for incident_id, ticket, before, after in rows:
        found.setdefault((incident_id, ticket), {"before": before, "after": after})
    return found


def _build(items: list[CompensationItem]) -> list[Case]:
    grouped: dict[tuple[int, str], list[CompensationItem]] = defaultdict(list)
    for item in items:
        grouped[(item.incident_id, item.ticket_id)].append(item)
    triage = _triage({k[0] for k in grouped}, {k[1] for k in grouped})
    covered: dict[tuple[int, str], list[CompensationItem]] = defaultdict(list)
    for item in items:
        for other in sequencing.grouped_tickets(item)[1:]:
            covered[(item.incident_id, other)].append(item)
    out = []
    for (incident_id, ticket), group in grouped.items():
        group.sort(key=lambda i: (kinds.spec(i.kind).order, i.pk))  # money first, then its email, then the rest
        currency = next((i.currency for i in group if i.moves_money), group[0].currency)
        first = group[0]
        case = Case(incident_id=incident_id, ticket=ticket, customer=first.facts.get("customer", ""),
                    customer_email=first.customer_email, currency=currency,
                    summary=_sentence(group, triage.get((incident_id, ticket), {}), currency))
        case.items = [CaseItem(i, waits_for=sequencing.waits_for(i, siblings=group),
                               refused_money=sequencing.refused_money(i, siblings=group)) for i in group]
        case.message_elsewhere = covered.get((incident_id, ticket), [])
        out.append(case)
    out.sort(key=lambda c: (STATE_RANK[c.state], -c.incident_id, c.ticket))
    return out


def _items(*, user, incident: Incident | None):
    qs = tenancy.scoped(CompensationItem.objects.all(), user=user, path="incident__workspace")
    if incident is not None:
        return qs.filter(incident=incident)
    newest = (qs.filter(status=St.PENDING).order_by("-incident_id").values_list("incident_id", flat=True)
              .distinct()[:INCIDENT_LIMIT])
    return qs.filter(incident_id__in=list(newest))


def cases(*, user, incident: Incident | None = None, status: str | None = None) -> list[Case]:
    """The cases `user` may see (one incident's, or those of the newest incidents with pending items),
    needing a decision first. `status`: "pending" (cases with an undecided item), "decided" (the rest)."""
    found = _build(list(_items(user=user, incident=incident).select_related("incident", "decided_by", "delivery")
                        .defer("incident__plan", "incident__verification")))
    if status == ItemStatus.PENDING:
        return [c for c in found if c.pending]
    if status == "decided":
        return [c for c in found if not c.pending]
    return found


def case(*, user, incident_id: int, ticket: str) -> Case | None:
    """One case, if `user` may see it, with its ticket's before → after and its items' edits; None
    otherwise (as for a case that does not exist)."""
    # With, in the same query, the customer's one message about several tickets when another case holds it.
    rows = list(tenancy.scoped(CompensationItem.objects.all(), user=user, path="incident__workspace")
                .filter(Q(ticket_id=ticket) | Q(kind__in=list(kinds.MESSAGES), facts__tickets__contains=[ticket]),
                        incident_id=incident_id)
                .select_related("incident", "decided_by", "delivery").defer("incident__plan", "incident__verification")
                .order_by("pk"))
    items = [i for i in rows if i.ticket_id == ticket]
    if not items:
        return None
    found = _build(items)[0]
    found.message_elsewhere = [i for i in rows if i.ticket_id != ticket]
    diffs = edit_diffs(items)
    for entry in found.items:
        entry.edits = diffs.get(entry.item.pk, [])
    found.story = ticket_story.story(incident=items[0].incident, ticket=ticket)
    return found


def totals(found: list[Case]) -> dict:
    """What a list of cases adds up to: money at stake per currency, items, and cases left to decide."""
    money: dict[str, int] = defaultdict(int)
    for c in found:
        money[c.currency] += c.at_stake_cents
    return {"cases": len(found), "left": sum(1 for c in found if c.pending),
            "items": sum(len(c.items) for c in found),
            "pending_items": sum(len(c.pending) for c in found),
            "money": [{"currency": cur, "cents": n, "text": format_money(n, cur)} for cur, n in sorted(money.items())]}


def next_case(*, user, after: tuple[int, str] | None = None, incident: Incident | None = None) -> Case | None:
    """The next case that needs a decision, other than `after` (the one just decided)."""
    return next((c for c in cases(user=user, incident=incident, status=ItemStatus.PENDING) if c.key != after), None)
