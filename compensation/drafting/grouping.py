"""One message per customer per incident: the per-ticket messages of one customer become one.

compensation.drafting.netting nets each ticket on its own, so a customer with several tickets in one
incident would get one message per ticket. Here the incident's message items (`correction_email`, and
`replacement_email` of tickets with nothing to correct) are grouped by customer, and a customer with
messages on two or more tickets gets ONE item instead: a `correction_email` when any of them corrects
something (else a `replacement_email`), on the customer's first ticket (by id, the "lead" ticket, whose
case shows it), carrying every effect of the messages it stands for, with one section per ticket
(compensation.drafting.customer_message writes each ticket's correction or answer as a numbered entry).

Who the customer is: the ticket's email address, trimmed and lower-cased (`customer_key`). A ticket
that is not in the workspace has no known customer and stays on its own. Money items are never
grouped: each still moves against its own ticket's payment.

Idempotent like the rest of drafting: the grouped item's draft key is its lead ticket and every effect
id it carries, so drafting again (after a crash, a catch-up, a second worker) finds it. Drafting parts
are split by customer (compensation.drafting.drafts), so one customer's tickets are always drafted
together; and drafting skips an item whose every effect is already held, so tickets grouped otherwise
since (an address changed) never make a second message. Limits: a ticket added to the workspace after its item was drafted is not merged into an
existing message of the same customer (its own message stays); a message a person already decided
is never merged again.
"""
from __future__ import annotations

from collections import defaultdict

from compensation.drafting.netting import PlannedItem
from core.money import locale_name
from core.vocabulary import ItemKind as K
from provenance.models import Ticket

GROUPED_KINDS = (K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL)
# What one ticket's section keeps of its own facts (compensation.drafting.customer_message reads them).
SECTION_KEYS = ("ticket", "situation", "currency", "paid_cents", "refunded_cents", "replacement_cents",
                "reverse_cents", "corrected_body", "corrected_subject", "original_subject")
SUBJECT_SHOWN = 80  # characters of the customer's own ticket subject that name a section


def customer_key(email: str | None, ticket: str) -> str:
    """Who a ticket's customer is, for grouping: the address, normalised; the ticket itself without one."""
    address = (email or "").strip().lower()
    return f"email:{address}" if address else f"ticket:{ticket}"


def customer_keys(workspace_id: int, tickets) -> dict[str, str]:
    """The customer key of each of `tickets` (ticket id -> key), read in one query."""
    tickets = {t for t in tickets if t}
    found = dict(Ticket.objects.filter(workspace_id=workspace_id, ticket_id__in=tickets)
                 .values_list("ticket_id", "customer_email"))
    return {t: customer_key(found.get(t), t) for t in tickets}


def group_messages(planned: list[PlannedItem], keys: dict[str, str]) -> list[PlannedItem]:
    """`planned` with each customer's messages on two or more tickets replaced by one grouped item, in
    the place of the customer's first message."""
    by_customer: dict[str, list[PlannedItem]] = defaultdict(list)
    for p in planned:
        if p.kind in GROUPED_KINDS and p.ticket:
            by_customer[keys.get(p.ticket) or customer_key(None, p.ticket)].append(p)
    replaced: dict[int, PlannedItem | None] = {}
    for messages in by_customer.values():
        if len({m.ticket for m in messages}) < 2:
            continue
        messages = sorted(messages, key=lambda m: (m.ticket, GROUPED_KINDS.index(m.kind), m.draft_suffix))
        kind = K.CORRECTION_EMAIL if any(m.kind == K.CORRECTION_EMAIL for m in messages) else K.REPLACEMENT_EMAIL
        one = PlannedItem(kind, messages[0].ticket, 0, messages[0].currency,
                          [e for m in messages for e in m.effects], "grouped", {}, sections=messages)
        for m in messages:
            replaced[id(m)] = None
        replaced[id(next(p for p in planned if any(p is m for m in messages)))] = one
    if not replaced:
        return planned
    return [replaced[id(p)] if id(p) in replaced else p for p in planned if replaced.get(id(p), p) is not None]


def section_facts(planned: PlannedItem, facts: dict, ticket: Ticket | None) -> dict:
    """One ticket's entry in a grouped message: its situation and numbers, and the customer's own subject."""
    section = {k: facts.get(k) for k in SECTION_KEYS if facts.get(k) is not None}
    section["kind"] = planned.kind
    section["ticket_subject"] = (ticket.subject if ticket is not None else "")[:SUBJECT_SHOWN]
    if planned.kind == K.REPLACEMENT_EMAIL:
        details = planned.effects[0].get("details") or {}
        section["corrected_body"] = details.get("body", "")
        section["corrected_subject"] = details.get("subject", "")
    return section


def grouped_facts(planned: PlannedItem, sections: list[tuple[dict, dict]]) -> dict:
    """The grouped item's facts from its sections' (facts, section) pairs: the lead ticket's customer,
    every ticket's text (links and addresses the message may quote), and one section per ticket."""
    lead = sections[0][0]
    facts = {k: v for k, v in lead.items()
             if (k not in SECTION_KEYS and k not in ("original_body", "effect_cents")) or k in ("ticket", "currency")}
    facts.update({
        "situation": "grouped", "tickets": [f["ticket"] for f, _ in sections],
        "sections": [s for _, s in sections],
        "ticket_text": "\n".join(f.get("ticket_text") or "" for f, _ in sections),
        "refunded_cents": 0, "replacement_cents": 0, "reverse_cents": 0, "netted": False, "max_cents": None,
        # What the text may mention is checked per currency against every section (validation.text_problems).
        "paid_cents": max((f.get("paid_cents") or 0 for f, _ in sections if f.get("currency") == lead.get("currency")),
                          default=None),
    })
    return facts


def customer_locale(tickets, fallback: str) -> str:
    """The locale a customer's one message writes money in: that of the first of their tickets (in the
    message's order) that names one, else `fallback` (the workspace's). Not the lead ticket's alone: a
    customer whose locale only a later ticket names would read every amount the workspace's way."""
    return next((locale_name(t.locale) for t in tickets if t is not None and t.locale), fallback)


def is_grouped(facts: dict) -> bool:
    return len(facts.get("sections") or ()) > 1
