"""The ticket's customer as a draft's facts: what validation checks a draft against (recipient, what
was paid, the payment reference, the ticket's text for links and addresses).

A ticket that is not in the workspace when the item is drafted (an agent recorded effects for tickets
kintsugi never got) leaves the item waiting for it: `ticket_missing`, no customer, and no limit from a
payment nobody knows (the netting's own numbers still bound the money). Drafting again after the ticket
appears picks it up (`refreshed`); a reviewer may instead name the customer of an email
(compensation.review.services.set_customer)."""
from __future__ import annotations

from django.conf import settings

from core.money import locale_name
from provenance.models import Ticket, Workspace

TICKET_KEYS = ("customer", "customer_email", "payment_reference", "currency", "paid_cents", "ticket_text",
               "ticket_missing", "customer_set_by", "locale")


def workspace_locale(workspace: Workspace | int | None) -> str:
    """The locale a workspace's customer messages write money in: its own, else the deployment's."""
    if isinstance(workspace, int):
        workspace = Workspace.objects.filter(pk=workspace).only("message_locale").first()
    own = getattr(workspace, "message_locale", "") or ""
    return locale_name(own or getattr(settings, "KINTSUGI_MESSAGE_LOCALE", "") or "en_US")


def ticket_facts(ticket: Ticket | None, *, currency: str, locale: str = "en_US") -> dict:
    """The ticket's customer as facts; `locale` is the workspace's (the ticket's own wins)."""
    if ticket is None:
        return {"customer": "", "customer_email": "", "payment_reference": "", "currency": currency,
                "paid_cents": None, "ticket_text": "", "ticket_missing": True, "locale": locale}
    return {"customer": ticket.customer_name, "customer_email": ticket.customer_email,
            "payment_reference": ticket.payment_reference, "currency": ticket.currency,
            "paid_cents": ticket.amount_cents, "ticket_text": "\n".join([ticket.customer_email, ticket.subject, ticket.body]),
            "ticket_missing": False, "locale": locale_name(ticket.locale) if ticket.locale else locale}


def refreshed(facts: dict, *, workspace_id: int, ticket_id: str) -> dict | None:
    """`facts` with the ticket's customer, when the item waited for a ticket that is now in the workspace;
    None when nothing changes."""
    if not facts.get("ticket_missing"):
        return None
    ticket = Ticket.objects.filter(workspace_id=workspace_id, ticket_id=ticket_id).first()
    if ticket is None:
        return None
    fresh = {k: v for k, v in facts.items() if k not in TICKET_KEYS}
    return fresh | ticket_facts(ticket, currency=facts.get("currency", "USD"), locale=workspace_locale(workspace_id))
