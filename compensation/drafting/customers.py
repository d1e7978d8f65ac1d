"""The ticket's customer as a draft's facts: what validation checks a draft against (recipient, what
was paid, the payment reference, the ticket's text for links and addresses).

A ticket that is not in the workspace when the item is drafted (an agent recorded effects for tickets
kintsugi never got) leaves the item waiting for it: `ticket_missing`, no customer, and no limit from a
payment nobody knows (the netting's own numbers still bound the money). Drafting again after the ticket
appears picks it up (`refreshed`); a reviewer may instead name the customer of an email
(compensation.review.services.set_customer)."""
from __future__ import annotations

from provenance.models import Ticket

TICKET_KEYS = ("customer", "customer_email", "payment_reference", "currency", "paid_cents", "ticket_text",
               "ticket_missing", "customer_set_by")


def ticket_facts(ticket: Ticket | None, *, currency: str) -> dict:
    if ticket is None:
        return {"customer": "", "customer_email": "", "payment_reference": "", "currency": currency,
                "paid_cents": None, "ticket_text": "", "ticket_missing": True}
    return {"customer": ticket.customer_name, "customer_email": ticket.customer_email,
            "payment_reference": ticket.payment_reference, "currency": ticket.currency,
            "paid_cents": ticket.amount_cents, "ticket_text": "\n".join([ticket.customer_email, ticket.subject, ticket.body]),
            "ticket_missing": False}


def refreshed(facts: dict, *, workspace_id: int, ticket_id: str) -> dict | None:
    """`facts` with the ticket's customer, when the item waited for a ticket that is now in the workspace;
    None when nothing changes."""
    if not facts.get("ticket_missing"):
        return None
    ticket = Ticket.objects.filter(workspace_id=workspace_id, ticket_id=ticket_id).first()
    if ticket is None:
        return None
    fresh = {k: v for k, v in facts.items() if k not in TICKET_KEYS}
    return fresh | ticket_facts(ticket, currency=facts.get("currency", "USD"))
