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
"""
from __future__ import annotations

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


def waits_for(item: CompensationItem, *, siblings=None) -> CompensationItem | None:
    """The money item whose approval `item` has to wait for before it executes; None when it may go.

    A money item that was rejected (or cancelled) holds its email for good, unless a reviewer edited
    the email when approving it after that rejection: then the text is theirs and stands alone."""
    money = explained_item(item, siblings=siblings)
    if money is None or money.status in GONE_AHEAD:
        return None
    if (money.status != St.PENDING and item.edited and item.decided_at and money.decided_at
            and item.decided_at > money.decided_at):
        return None
    return money


def refused_money(item: CompensationItem, *, siblings=None) -> CompensationItem | None:
    """The rejected (or cancelled) money item `item` explains, or None."""
    money = explained_item(item, siblings=siblings)
    return money if money is not None and money.status in (St.REJECTED, St.CANCELLED) else None


def explaining_emails(money: CompensationItem):
    """The emails that explain `money` (a reversal or a replacement refund)."""
    if money.kind not in EXPLAINED_KINDS:
        return CompensationItem.objects.none()
    return CompensationItem.objects.filter(incident_id=money.incident_id, ticket_id=money.ticket_id,
                                           kind__in=EXPLAINING_KINDS)


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
