"""Which item of a ticket waits for which: an email about a money item does not leave before it.

A ticket's emails speak of the money item drafted beside it (the `refund_reversal`, or the
`replacement_refund` of a refund that grew or that the repair produced): the `correction_email` explains
it ("we will ask for $55.00 back"), and a `replacement_email` states the ticket's outcome under the clean
policy ("this order does not qualify for a refund", "we have refunded $40.00"). Either, sent before the
money item is approved, would state something a reviewer may still refuse. So:
- approving such an email while its money item is pending records the approval but holds execution
  (`waits_for` names the item it waits for; compensation.delivery.execution skips it);
- approving the money item releases the emails waiting on it (`released_by`), each executed exactly
  once through the execution key written at its own approval;
- rejecting the money item leaves its emails unsendable as drafted, and says so: a pending one is marked
  invalid with a problem naming the rejected item, and one already approved and held is reopened
  (approved → pending, with the same problem) instead of waiting for an approval that cannot come.
  Either way a reviewer then rejects it, or edits it so it stands alone (approving it unedited is
  refused); the case page lists it under "needs a decision" with the warning.
Limits: the link is per (incident, ticket); a ticket has at most one money item (compensation.drafting.netting
nets them), so "the" money item is well defined.

A customer's one message about several tickets (compensation.drafting.grouping, `facts["tickets"]`)
explains the money items of all of them: it waits until each is approved or rejected. A rejection
does not leave it unsendable: its other tickets' corrections must still reach the customer, so the
message is written again with that ticket's entry saying the refund stays as it is
(compensation.delivery.grouped_messages), and an approval given before is reopened (the approval binds the
text, which changed). Until it is written again it is held like a one-ticket message (`refused_money`).
"""
from __future__ import annotations

from django.db.models import Q

from compensation.models import CompensationItem

K, St = CompensationItem.Kind, CompensationItem.Status
EXPLAINED_KINDS = (K.REFUND_REVERSAL, K.REPLACEMENT_REFUND)
EXPLAINING_KINDS = (K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL)
# A money item in one of these has gone ahead: the email that explains it may leave.
GONE_AHEAD = (St.APPROVED, St.EXECUTED)


def explained_item(item: CompensationItem, *, siblings=None) -> CompensationItem | None:
    """The money item `item` (an email of the ticket) speaks of, or None. `siblings`: the items of the same
    incident and ticket already loaded (a case's), to answer without a query."""
    if item.kind not in EXPLAINING_KINDS:
        return None
    if siblings is not None:
        return min((s for s in siblings if s.kind in EXPLAINED_KINDS), key=lambda s: s.pk, default=None)
    return (CompensationItem.objects.filter(incident_id=item.incident_id, ticket_id=item.ticket_id,
                                            kind__in=EXPLAINED_KINDS).order_by("pk").first())


def grouped_tickets(item: CompensationItem) -> list[str]:
    """The tickets of a customer's one message about several tickets; [] for any other item."""
    tickets = (item.facts or {}).get("tickets") or []
    return list(tickets) if item.kind in EXPLAINING_KINDS and len(tickets) > 1 else []


def explained_items(item: CompensationItem, *, siblings=None) -> list[CompensationItem]:
    """Every money item `item` speaks of: its ticket's, or each of its tickets' for a grouped message."""
    tickets = grouped_tickets(item)
    if not tickets:
        money = explained_item(item, siblings=siblings)
        return [money] if money is not None else []
    return list(CompensationItem.objects.filter(incident_id=item.incident_id, ticket_id__in=tickets,
                                                kind__in=EXPLAINED_KINDS).order_by("pk"))


def said_kept(item: CompensationItem) -> set[str]:
    """The tickets whose entry in a grouped message already says the refund stays as it is."""
    return {s.get("ticket") for s in (item.facts or {}).get("sections") or () if s.get("money_refused")}


def _stands_alone(item: CompensationItem, money: CompensationItem) -> bool:
    """A reviewer edited the email when approving it after `money` was decided: the text is theirs."""
    return bool(money.status != St.PENDING and item.edited and item.decided_at and money.decided_at
                and item.decided_at > money.decided_at)


def waits_for(item: CompensationItem, *, siblings=None) -> CompensationItem | None:
    """The money item whose approval `item` has to wait for before it executes; None when it may go.

    A money item that was rejected (or cancelled) holds its email for good, unless a reviewer edited
    the email when approving it after that rejection: then the text is theirs and stands alone; or the
    email is a grouped message already written again to say that ticket's refund stays as it is."""
    kept = said_kept(item)
    for money in explained_items(item, siblings=siblings):
        if money.status in GONE_AHEAD or _stands_alone(item, money):
            continue
        if money.status != St.PENDING and money.ticket_id in kept:
            continue
        return money
    return None


def refused_money(item: CompensationItem, *, siblings=None) -> CompensationItem | None:
    """The rejected (or cancelled) money item `item` explains and does not yet say is refused, or None."""
    kept = said_kept(item)
    return next((m for m in explained_items(item, siblings=siblings)
                 if m.status in (St.REJECTED, St.CANCELLED) and m.ticket_id not in kept), None)


def explaining_emails(money: CompensationItem):
    """The emails that explain `money` (a reversal or a replacement refund): its ticket's, and a grouped
    message that covers its ticket."""
    if money.kind not in EXPLAINED_KINDS:
        return CompensationItem.objects.none()
    return CompensationItem.objects.filter(Q(ticket_id=money.ticket_id) | Q(facts__tickets__contains=[money.ticket_id]),
                                           incident_id=money.incident_id, kind__in=EXPLAINING_KINDS)


def released_by(money: CompensationItem) -> list[int]:
    """Ids of approved emails that were waiting for `money` and may now execute."""
    return list(explaining_emails(money).filter(status=St.APPROVED).order_by("pk").values_list("pk", flat=True))


def marked_by_rejection(money: CompensationItem) -> list[CompensationItem]:
    """The emails a rejected `money` item left needing a decision (what the reviewer is warned about)."""
    if money.status not in (St.REJECTED, St.CANCELLED):
        return []
    return list(explaining_emails(money).filter(status=St.PENDING, valid=False).order_by("pk"))


def rejection_warning(money: CompensationItem) -> str:
    """One sentence for the reviewer who just rejected `money` (empty when no email was affected)."""
    marked = marked_by_rejection(money)
    if not marked:
        return ""
    listed = ", ".join(f"the {e.get_kind_display()} #{e.pk}" for e in marked)
    return (f"{listed} spoke of the rejected {money.get_kind_display()} #{money.pk} and will not go out as "
            f"written: reject {'it' if len(marked) == 1 else 'them'}, or edit {'it' if len(marked) == 1 else 'them'} "
            f"to stand alone.")


def rejection_problem(money: CompensationItem) -> str:
    return (f"speaks of {money.get_kind_display()} #{money.pk}, which was rejected: reject this email, "
            f"or edit it so it stands alone")
