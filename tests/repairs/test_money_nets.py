"""Money nets correctly when a ticket was paid back more than once (the customer wrote again and was
refunded again): the reversals are drafted against what was paid in total, one per payment, none above
what the customer paid, every one approvable as drafted; and the what-if lists only tickets whose
decision really changed."""
from collections import defaultdict

import pytest

from compensation.models import CompensationItem
from provenance.agents import agent
from provenance.models import Source, Ticket, Workspace
from provenance.recording.services import record_root
from repairs.what_if import what_if
from tests.helpers import flagger, repair

pytestmark = pytest.mark.django_db(transaction=True)
FAQ = "hc/late-faq"
POISON = "Late deliveries: a full refund of the order."
PRICE, SHIPPING = 15100, 1295
K = CompensationItem.Kind


@agent("twice_research")
def twice_research(rec, payload):
    page = rec.ingest(payload["source"]) or ""
    rec.set("policy/late", "full" if "full refund" in page else "shipping")
    return {"read": payload["source"]}


@agent("twice_refunder")
def twice_refunder(rec, payload):
    # Each message of the customer is answered with a refund: the whole order under the poisoned page,
    # the shipping fee under the clean one.
    full = rec.get("policy/late") == "full"
    ticket, amount = payload["ticket"], PRICE if full else SHIPPING
    rec.effect("refund", amount=amount, ticket=ticket, reference=f"ch_{ticket}")
    rec.effect("email", ticket=ticket, to=f"{ticket}@customers.example", subject=f"Your refund for {ticket}",
               body=f"Hello, we have refunded ${amount / 100:.2f}.")
    return {"choice": "refund", "level": "full" if full else "shipping"}


@agent("twice_noter")
def twice_noter(rec, payload):
    # Writes what it read, but always replies: its re-run changes a fact, never its decision.
    rec.set(f"{payload['ticket']}/note", f"policy was {rec.get('policy/late')}")
    return {"choice": "reply", "level": "none"}


def _desk(name: str) -> None:
    ws = Workspace.objects.create(name=name)
    Source.objects.create(workspace=ws, source_id=FAQ, content=POISON)
    for t in ("t1", "t2", "t3"):
        Ticket.objects.create(workspace=ws, ticket_id=t, customer_name=f"Customer {t}",
                              customer_email=f"{t}@customers.example", subject="Late", body="It is late",
                              amount_cents=PRICE, payment_reference=f"ch_{t}")
    record_root(workspace=name, agent="twice_research", payload={"source": FAQ})
    for t in ("t1", "t1", "t2"):  # t1's customer wrote twice and was refunded twice
        record_root(workspace=name, agent="twice_refunder", payload={"ticket": t})
    record_root(workspace=name, agent="twice_noter", payload={"ticket": "t3"})


def test_a_ticket_refunded_twice_gets_reversals_against_what_was_paid_in_total_each_approvable():
    _desk("twice")
    wi = what_if(workspace=Workspace.objects.get(name="twice"), source=FAQ, actor=flagger(), via="cli")
    # Red: t3's re-run wrote another note but returned the same decision, and was listed as changed.
    assert [t["ticket"] for t in wi.tickets_changed] == ["t1", "t2"]
    assert all(t["before"] != t["after"] for t in wi.tickets_changed)

    incident = repair("twice", FAQ)
    assert incident.status == "repaired", incident.error
    items = list(CompensationItem.objects.filter(incident=incident))
    # Red: one netted reversal of $276.10 on t1, refused as drafted ("above the $151.00 the customer paid").
    assert [(i.ticket_id, i.problems) for i in items if not i.valid] == []
    reversals = defaultdict(list)
    for i in items:
        if i.kind == K.REFUND_REVERSAL:
            reversals[i.ticket_id].append(i.amount_cents)
            assert i.amount_cents <= PRICE
    # What was paid back in total, less what the clean policy pays (the shipping fee, once per message).
    assert sorted(reversals["t1"]) == [PRICE - SHIPPING * 2, PRICE] and sum(reversals["t1"]) == 2 * (PRICE - SHIPPING)
    assert reversals["t2"] == [PRICE - SHIPPING]
    assert not [i for i in items if i.kind == K.REPLACEMENT_REFUND]  # the shipping fees were netted, not paid again
    # One email per customer explains the total.
    emails = [i for i in items if i.kind in (K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL)]
    assert sorted((i.ticket_id, i.kind) for i in emails) == [("t1", K.CORRECTION_EMAIL), ("t2", K.CORRECTION_EMAIL)]
    t1 = next(i for i in emails if i.ticket_id == "t1")
    assert "302.00" in t1.body and "276.10" in t1.body
    # The what-if said the same money.
    assert wi.amount_reversed == {"USD": sum(map(sum, reversals.values()))}
    assert sorted((i["kind"], i["ticket"], i["amount_cents"], i["valid"]) for i in wi.items) == sorted(
        (i.kind, i.ticket_id, i.amount_cents, i.valid) for i in items)


@agent("twice_router")
def twice_router(rec, payload):
    # The policy picks the child that answers: a superseded old child, a new one in the repair.
    target = "twice_full_mailer" if rec.get("policy/late") == "full" else "twice_fee_mailer"
    rec.handoff(target, {"ticket": payload["ticket"]})
    return {"route": target}


def _mail(rec, payload, words: str) -> dict:
    ticket = payload["ticket"]
    rec.effect("email", ticket=ticket, to=f"{ticket}@customers.example", subject=f"About {ticket}",
               body=f"Hello, {words}.")
    return {"mailed": ticket}


@agent("twice_full_mailer")
def twice_full_mailer(rec, payload):
    return _mail(rec, payload, "your whole order will be refunded")


@agent("twice_fee_mailer")
def twice_fee_mailer(rec, payload):
    return _mail(rec, payload, "the shipping fee will be refunded")


def test_a_superseded_reply_and_its_new_replacement_reach_the_customer_as_one_correction():
    ws = Workspace.objects.create(name="twice-reply")
    Source.objects.create(workspace=ws, source_id=FAQ, content=POISON)
    Ticket.objects.create(workspace=ws, ticket_id="t1", customer_name="Customer t1", customer_email="t1@customers.example",
                          subject="Late", body="It is late", amount_cents=PRICE, payment_reference="ch_t1")
    record_root(workspace="twice-reply", agent="twice_research", payload={"source": FAQ})
    record_root(workspace="twice-reply", agent="twice_router", payload={"ticket": "t1"})
    incident = repair("twice-reply", FAQ)
    assert incident.status == "repaired", incident.error
    assert incident.counts["superseded"] == 1 and incident.counts["new"] == 1
    # Red: a correction_email and a replacement_email, two messages to one customer.
    [item] = CompensationItem.objects.filter(incident=incident)
    assert item.kind == K.CORRECTION_EMAIL and item.facts["situation"] == "message_corrected" and item.valid
    assert "the shipping fee will be refunded" in item.body and "disregard" in item.body
    assert sorted(e["role"] for e in item.original) == ["invalidated", "replacement"]
