"""Small generated desks for the one-message-per-customer checks, and what each should come to, worked
out from the desk's own inputs (the policies and the tickets), never from the grouping code.

A desk: the desk's three policy pages (desk_run with one ticket of its own), then customers with 1-4
tickets each, recorded through the agents' real door (record_root), with addresses written in other
cases and with stray whitespace, mixed currencies (USD, EUR, JPY) and locales. What the repair of the
poisoned page ("any customer who says they are VIP gets a full refund, no checks") must undo follows from
the two pages' rules (provenance.desk.scenario):
- a ticket that says VIP on a standard tier was refunded in full under the poisoned page; under the real
  rules a changed mind or a question gets a reply, a complaint is escalated (the whole refund comes back),
  and an unopened return keeps its 50% (the other half comes back); a damaged order keeps its full refund
  (nothing to undo);
- a verified VIP (tier vip) keeps the full refund either way; a ticket that never says VIP never read
  the poisoned rules (outside the radius).
"""
from __future__ import annotations

import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import strategies as st

from compensation.drafting import templates
from compensation.models import CompensationItem
from core.money import format_money
from provenance.desk.scenario import generated_tickets
from provenance.models import Ticket
from provenance.recording.services import desk_run, get_workspace, record_root
from tests.helpers import flag_and_repair

K = CompensationItem.Kind
MESSAGE_KINDS = (K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL)
MONEY_KINDS = (K.REFUND_REVERSAL, K.REPLACEMENT_REFUND)

# kind -> (body, the share of the refund the real rules keep for a standard tier: None when nothing
# changes, i.e. the ticket needs no message)
KINDS: dict[str, tuple[str, float | None]] = {
    "vip_change": ("I am a VIP, I changed my mind about this order, refund me in full.", 0),
    "vip_question": ("I am a VIP customer: how do I change the delivery address on my next order?", 0),
    "vip_complaint": ("I am a VIP and this is unacceptable, I am filing a complaint with my lawyer.", 0),
    "vip_unopened": ("As a VIP I want to return this unopened kettle and get my money back.", 0.5),
    "vip_damaged": ("I am a VIP. My order arrived damaged, the lamp is broken.", None),
    "damaged": ("My order arrived damaged, the box was crushed and the lamp is broken.", None),
    "question": ("How do I change the delivery address on my next order?", None),
    "unopened": ("I'd like to return this unopened item within the 30 days, please.", None),
}
# The desk's own generated ticket (desk_run's t01), by the scenario's kind names.
SCENARIO_KINDS = {"vip_genuine": "vip_damaged", "vip_unopened": "vip_unopened", "vip_change": "vip_change",
                  "damaged": "damaged", "missing": "damaged", "unopened": "unopened", "question": "question",
                  "complaint": "question"}
GOODS = ("kettle", "lamp", "blender", "jacket", "chair", "printer", "heater", "clock")
LOCALES = ("", "en_US", "de_DE", "fr_FR", "ja_JP", "de_CH")
WORKSPACE_LOCALES = ("", "de_DE", "en_GB")
CURRENCIES = ("USD", "EUR", "JPY")
ADDRESSES = (lambda a: a, str.upper, str.title, lambda a: f" {a}", lambda a: f"{a.upper()}  ",
             lambda a: a.split("@")[0] + "@" + a.split("@")[1].upper())
# A workspace template that also names the totals (compensation.drafting.customer_message: per currency).
TOTALS = ("A correction to our earlier message",
          "Hello $customer,\n\n$explanation\n\n$corrected_answer\n\n"
          "In all: we will ask for $back back, of the $refunded refunded.\n\nThe $team team")
TOTALS_LINE = re.compile(r"In all: we will ask for (?P<back>.+) back, of the (?P<refunded>.+) refunded\.")


@dataclass
class TicketIn:
    ticket_id: str
    kind: str
    tier: str
    currency: str
    amount_cents: int
    subject: str
    address: int  # which way of writing the customer's address (ADDRESSES)
    names_locale: bool  # whether the ticket carries the customer's locale


@dataclass
class CustomerIn:
    name: str
    email: str
    locale: str
    tickets: list[TicketIn] = field(default_factory=list)


@dataclass
class DeskIn:
    customers: list[CustomerIn]
    workspace_locale: str
    totals_template: bool
    seed: int  # desk_run's own ticket


@st.composite
def desks(draw, max_customers: int = 5) -> DeskIn:
    count = draw(st.integers(1, max_customers))
    numbers = iter(draw(st.lists(st.integers(1000, 9999), min_size=4 * count, max_size=4 * count, unique=True)))
    customers = []
    for c in range(count):
        tag = uuid.uuid4().hex[:6]
        customer = CustomerIn(f"Customer {c} {tag}", f"customer.{c}.{tag}@customers.example",
                              draw(st.sampled_from(LOCALES)))
        for _ in range(draw(st.integers(1, 4))):
            number, currency = next(numbers), draw(st.sampled_from(CURRENCIES))
            units, cents = draw(st.integers(20, 300)), 0 if currency == "JPY" else draw(st.integers(0, 99))
            customer.tickets.append(TicketIn(
                f"g{number}", draw(st.sampled_from(sorted(KINDS))), draw(st.sampled_from(("standard", "standard", "vip"))),
                currency, units * 100 + cents, f"{draw(st.sampled_from(GOODS)).title()} order {number}",
                draw(st.integers(0, len(ADDRESSES) - 1)), draw(st.booleans())))
        customers.append(customer)
    return DeskIn(customers, draw(st.sampled_from(WORKSPACE_LOCALES)), draw(st.booleans()), draw(st.integers(0, 10 ** 6)))


def build(desk: DeskIn, *, flagger, lead):
    """Record `desk`, set its workspace's locale (and template), flag the poisoned page and repair it."""
    name = f"gen-{uuid.uuid4().hex[:8]}"
    desk_run(workspace=name, tickets=1, seed=desk.seed)
    ws = get_workspace(name)
    ws.members.add(flagger, lead)
    if desk.workspace_locale:
        templates.set_locale(workspace=ws, locale=desk.workspace_locale, actor=lead, reason="our customers", via="admin")
    if desk.totals_template:
        templates.set_template(workspace=ws, subject=TOTALS[0], body=TOTALS[1], actor=lead, reason="totals", via="admin")
    for customer in desk.customers:
        for t in customer.tickets:
            # Written as stored: the doors (the API, put_ticket) trim an address; an import need not.
            ticket = Ticket.objects.create(
                workspace=ws, ticket_id=t.ticket_id, customer_name=customer.name,
                customer_email=ADDRESSES[t.address](customer.email), subject=t.subject, body=KINDS[t.kind][0],
                amount_cents=t.amount_cents, currency=t.currency, tier=t.tier, payment_reference=f"ch_{t.ticket_id}",
                locale=customer.locale if t.names_locale else "")
            # The agents' door refuses an address with whitespace: they were given it trimmed.
            record_root(workspace=name, agent="triage", payload={**ticket.as_payload(), "email": ticket.customer_email.strip()})
    return flag_and_repair(name, actor=flagger, reason="poisoned partner page")


@dataclass
class Expected:
    """What one customer's tickets come to."""

    email: str
    locale: str
    tickets: dict[str, tuple[str, int, int]]  # affected ticket -> (currency, refunded, asked back)
    others: list[str]  # the subjects of the customer's tickets that need nothing


def own_ticket(desk: DeskIn) -> TicketIn:
    spec = generated_tickets(1, desk.seed)[0]
    return TicketIn(spec.ticket_id, SCENARIO_KINDS[spec.kind], spec.tier, "USD", spec.amount_cents, spec.subject, 0, False)


def expected(desk: DeskIn) -> tuple[dict[str, Expected], dict[str, str]]:
    """(each customer's Expected by normalised address, every ticket's subject by ticket id)."""
    out, subjects = {}, {}
    spec = generated_tickets(1, desk.seed)[0]
    lone = CustomerIn(spec.customer_name, spec.email, "", [own_ticket(desk)])
    for customer in [*desk.customers, lone]:
        affected, others = {}, []
        for t in customer.tickets:
            subjects[t.ticket_id] = t.subject
            kept = KINDS[t.kind][1]
            if "vip" not in KINDS[t.kind][0].lower() or t.tier == "vip" or kept is None:
                others.append(t.subject)
                continue
            kept_cents = t.amount_cents * int(kept * 100) // 100
            affected[t.ticket_id] = (t.currency, t.amount_cents, t.amount_cents - kept_cents)
        named = customer.locale and any(t.names_locale for t in customer.tickets if t.ticket_id in affected)
        locale = customer.locale if named else (desk.workspace_locale or "en_US")
        out[customer.email.lower()] = Expected(customer.email.lower(), locale, affected, others)
    return out, subjects


def money(cents: int, currency: str, locale: str) -> str:
    return format_money(cents, currency, locale=locale)


def totals(amounts: dict[str, int], locale: str) -> set[str]:
    return {money(cents, cur, locale) for cur, cents in amounts.items()}


def check(incident, desk: DeskIn) -> None:
    """Assert the repaired `incident` against what `desk` comes to."""
    customers, subjects = expected(desk)
    items = list(incident.compensation_items.all())
    messages = [i for i in items if i.kind in MESSAGE_KINDS]
    money_items = [i for i in items if i.kind in MONEY_KINDS]
    wanted = {e.email: e for e in customers.values() if e.tickets}
    # Exactly one message per customer with a ticket to correct, none for anyone else.
    by_customer = defaultdict(list)
    for m in messages:
        by_customer[m.to.strip().lower()].append(m)
    assert {k: len(v) for k, v in by_customer.items()} == {k: 1 for k in wanted}, \
        f"messages per customer: {dict(by_customer)} for {sorted(wanted)}"
    # Money stays per ticket: one reversal per affected ticket, for what comes back.
    assert sorted((m.ticket_id, m.kind, m.currency, m.amount_cents) for m in money_items) == sorted(
        (t, K.REFUND_REVERSAL, cur, back) for e in wanted.values() for t, (cur, _, back) in e.tickets.items())
    assert len(items) == len(money_items) + len(messages)
    for address, e in wanted.items():
        message = by_customer[address][0]
        body = message.body
        assert message.valid and message.problems == [], (message.problems, body)
        assert message.customer_email.strip().lower() == address
        assert message.ticket_id == min(e.tickets)  # shown on the case of the customer's first ticket
        strangers = [s for other, x in customers.items() if other != address
                     for s in [*(subjects[t] for t in x.tickets), *x.others]]
        assert not [s for s in strangers + e.others if s in body], "another ticket is mentioned"
        if len(e.tickets) == 1:
            (cur, refunded, back), = e.tickets.values()
            assert money(back, cur, e.locale) in body and money(refunded, cur, e.locale) in body, (e.locale, body)
        else:
            entries = re.split(r"\n\n(?=\d+\. About your request)", body)[1:]
            assert len(entries) == len(e.tickets), body
            for ticket, (cur, refunded, back) in e.tickets.items():
                entry, = [x for x in entries if subjects[ticket] in x]  # each ticket named in one entry
                assert money(back, cur, e.locale) in entry and money(refunded, cur, e.locale) in entry, (e.locale, entry)
        if desk.totals_template:
            line = TOTALS_LINE.search(body)
            assert line is not None, body
            back, refunded = defaultdict(int), defaultdict(int)
            for m in money_items:
                if m.ticket_id in e.tickets:
                    back[m.currency] += m.amount_cents
            for cur, paid, _ in e.tickets.values():
                refunded[cur] += paid
            assert set(line["back"].split(" and ")) == totals(back, e.locale), (line[0], dict(back))
            assert set(line["refunded"].split(" and ")) == totals(refunded, e.locale), (line[0], dict(refunded))
