"""Pluggable effect kinds: refunds and emails are registrations; a kind nobody registered (a team's
`store_credit`) still reaches a reviewer as a manual compensation carrying the effect; a registered kind
is dispatched and worded as registered. Drafts whose ticket is missing wait for it honestly and can be
fixed: the ticket appears and "Draft again" picks it up, or a reviewer names the email's customer."""
from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

from compensation.drafting import effect_kinds
from compensation.delivery.execution import execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import DecisionRefused, approve_item, redraft_item, reject_item, set_customer
from compensation.drafting.validation import validate_draft
from provenance.models import LedgerEntry, OutboxEmail, Source, Ticket, Workspace
from provenance.recording.services import record_root
from provenance.validation import InvalidInput
from repairs.models import Incident
from repairs.services import flag_source
from repairs.job import run_repair
from tests.credit_agents import PROMO_PAGE

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status


def goodwill_desk(people, *, tickets=("g1",)) -> Workspace:
    """Two goodwill tickets recorded under a promotions page; only `tickets` exist as Ticket rows."""
    ws = Workspace.objects.create(name=f"gw-{uuid.uuid4().hex[:8]}")
    ws.members.add(people.lead, people.reviewer)
    Source.objects.create(workspace=ws, source_id=PROMO_PAGE, content="Goodwill: credit everyone who writes in.")
    customers = {"g1": ("Mia Chen", "mia@customers.example"), "g2": ("Noor Haddad", "noor@customers.example")}
    for ticket in tickets:
        name, email = customers[ticket]
        Ticket.objects.create(workspace=ws, ticket_id=ticket, customer_name=name, customer_email=email,
                              subject="Late parcel", body="My parcel is two weeks late.", amount_cents=5000,
                              payment_reference=f"pay-{ticket}")
    record_root(workspace=ws.name, agent="promo_research", payload={"source": PROMO_PAGE})
    for ticket, (_, email) in customers.items():
        record_root(workspace=ws.name, agent="goodwill", payload={"ticket": ticket, "email": email})
    return ws


def repaired(ws, people, settings) -> Incident:
    settings.CELERY_TASK_ALWAYS_EAGER = False
    incident = flag_source(workspace=ws, source_id=PROMO_PAGE, actor=people.lead, reason="the promo was a fake",
                           via=Incident.Via.CLI)
    return run_repair(incident_id=incident.pk)


def test_refunds_and_emails_are_registrations_and_an_unknown_kind_falls_back_to_manual():
    assert effect_kinds.effect_kind("refund").compensated_by == K.REFUND_REVERSAL
    assert effect_kinds.effect_kind("email").replaced_by == K.REPLACEMENT_EMAIL
    unknown = effect_kinds.effect_kind("store_credit")
    assert unknown is effect_kinds.MANUAL and unknown.dispatch is None
    assert unknown.compensated_by == unknown.replaced_by == K.MANUAL_COMPENSATION
    with pytest.raises(ValueError, match="not a review item kind"):
        effect_kinds.register(effect_kinds.EffectKind("gift", None, "gift_card", "gift_card"))


def test_an_unregistered_store_credit_gets_a_manual_compensation_item_carrying_the_effect(people, settings):
    ws = goodwill_desk(people, tickets=("g1", "g2"))
    assert not LedgerEntry.objects.filter(workspace=ws).exists()  # kintsugi never dispatched the credit
    incident = repaired(ws, people, settings)
    assert incident.status == Incident.Status.REPAIRED
    manual = incident.compensation_items.get(ticket_id="g1", kind=K.MANUAL_COMPENSATION)
    [effect] = manual.original
    assert (effect["kind"], effect["role"], effect["amount_cents"]) == ("store_credit", "invalidated", 2000)
    assert "store_credit of $20.00 on ticket g1" in manual.body and "by hand" in manual.body
    # Its amount, never $0.00; still nothing moves through kintsugi (a person compensates it by hand).
    assert manual.valid and manual.amount_cents == 2000 and not manual.moves_money
    assert "a kind nobody declared" in manual.body
    assert set(incident.compensation_items.filter(ticket_id="g1").values_list("kind", flat=True)) == {
        K.MANUAL_COMPENSATION, K.CORRECTION_EMAIL}
    assert incident.compensations == 4  # per ticket: the store credit and the email that announced it

    with pytest.raises(DecisionRefused, match="say what was done"):
        approve_item(item=manual, actor=people.reviewer, reason="", via="admin")
    approve_item(item=manual, actor=people.reviewer, reason="removed the 20.00 credit in the shop admin", via="admin")
    done = execute_item(item_id=manual.pk)
    assert done.status == St.EXECUTED
    assert not LedgerEntry.objects.filter(workspace=ws).exists()
    assert not OutboxEmail.objects.filter(idempotency_key=f"compensation:{manual.pk}").exists()
    executed = AuditEvent.objects.get(subject_id=str(manual.pk), action="item.executed")
    assert executed.data["manual"] is True and "shop admin" in executed.data["recorded"]


def test_a_manual_note_that_is_empty_or_marked_up_is_refused():
    assert validate_draft(kind=K.MANUAL_COMPENSATION, draft={"body": "Remove the credit by hand."}, facts={}) == []
    assert validate_draft(kind=K.MANUAL_COMPENSATION, draft={"body": "Remove it.", "amount_cents": 2000},
                          facts={"effect_cents": 2000}) == []
    assert validate_draft(kind=K.MANUAL_COMPENSATION, draft={"body": "Remove it.", "amount_cents": 9000},
                          facts={"effect_cents": 2000})  # never another amount than the effect's
    assert validate_draft(kind=K.MANUAL_COMPENSATION, draft={"body": "  "}, facts={})
    assert validate_draft(kind=K.MANUAL_COMPENSATION, draft={"body": "<b>now</b>"}, facts={})
    assert validate_draft(kind="gift_card", draft={"body": "x"}, facts={}) == ["unknown kind 'gift_card'"]


def test_a_registered_kind_is_dispatched_by_its_registration_and_worded_for_the_reviewer(people, settings):
    granted = []

    def grant_credit(ws, run_number, batch):  # the team's own shop API would be called here
        granted.extend((row["ticket"], row["amount"], key) for row, _details, key in batch)

    effect_kinds.register(effect_kinds.EffectKind(
        "store_credit", grant_credit, K.MANUAL_COMPENSATION, K.MANUAL_COMPENSATION,
        decides="that the store credit was taken back in the shop admin"))
    try:
        ws = goodwill_desk(people)
        assert sorted(t for t, _, _ in granted) == ["g1", "g2"] and {a for _, a, _ in granted} == {2000}
        incident = repaired(ws, people, settings)
        manual = incident.compensation_items.get(ticket_id="g1", kind=K.MANUAL_COMPENSATION)
        assert effect_kinds.decides(manual) == "that the store credit was taken back in the shop admin"
        assert "a kind with no registration" not in manual.body
        assert len(granted) == 2  # the repair's re-runs granted nothing, and nothing twice
    finally:
        effect_kinds.unregister("store_credit")
    assert effect_kinds.effect_kind("store_credit") is effect_kinds.MANUAL


def test_a_draft_whose_ticket_is_missing_waits_and_draft_again_picks_up_the_ticket(people, settings, client):
    ws = goodwill_desk(people)  # g2 has no Ticket row
    incident = repaired(ws, people, settings)
    email = incident.compensation_items.get(ticket_id="g2", kind=K.CORRECTION_EMAIL)
    assert email.status == St.PENDING and not email.valid and email.waiting_for_ticket
    assert email.problems[-1].startswith("waiting for ticket g2: it is not in the workspace; add the ticket")
    manual = incident.compensation_items.get(ticket_id="g2", kind=K.MANUAL_COMPENSATION)
    assert manual.valid  # a person compensating by hand needs no ticket row
    client.force_login(people.reviewer)
    page = client.get(reverse("admin:compensation_compensationitem_change", args=[email.pk])).content.decode()
    assert 'id="draft-waiting"' in page and 'id="set-customer-form"' in page and "failed validation" not in page
    with pytest.raises(DecisionRefused, match="waiting for ticket g2"):
        approve_item(item=email, actor=people.reviewer, reason="", via="admin")

    redraft_item(item=email, actor=people.reviewer, reason="still no ticket", via="admin")
    email.refresh_from_db()
    assert email.waiting_for_ticket  # drafting again without the ticket changes nothing

    Ticket.objects.create(workspace=ws, ticket_id="g2", customer_name="Noor Haddad",
                          customer_email="noor@customers.example", subject="Late parcel", body="Where is it?",
                          amount_cents=5000, payment_reference="pay-g2")
    redraft_item(item=email, actor=people.reviewer, reason="the ticket was imported", via="admin")
    email.refresh_from_db()
    assert email.valid and not email.waiting_for_ticket and email.problems == []
    assert email.customer_email == email.to == "noor@customers.example" and "Noor Haddad" in email.body
    event = AuditEvent.objects.filter(subject_id=str(email.pk), action="item.redrafted").order_by("-seq").first()
    assert event.data["ticket_found"] == "g2" and event.data["customer_before"] == ""
    approve_item(item=email, actor=people.reviewer, reason="reads well", via="admin")


def test_a_reviewer_can_name_the_customer_of_a_waiting_email_through_the_admin(people, settings, client):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    ws = goodwill_desk(people)
    incident = repaired(ws, people, settings)
    email = incident.compensation_items.get(ticket_id="g2", kind=K.CORRECTION_EMAIL)
    with pytest.raises(InvalidInput):
        set_customer(item=email, name="Noor", email="not-an-address", actor=people.reviewer, reason="from CRM",
                     via="admin")
    people.lead.groups.add(Group.objects.get(name="Reviewer"))
    flagger = get_user_model().objects.get(pk=people.lead.pk)  # fresh: no cached permissions
    with pytest.raises(PermissionError, match="four-eyes"):
        set_customer(item=email, name="Noor", email="noor@customers.example", actor=flagger, reason="from CRM",
                     via="admin")
    with pytest.raises(DecisionRefused, match="has its ticket g1"):
        set_customer(item=incident.compensation_items.get(ticket_id="g1", kind=K.CORRECTION_EMAIL), name="Mia",
                     email="other@customers.example", actor=people.reviewer, reason="typo", via="admin")
    email.refresh_from_db()
    assert email.waiting_for_ticket and email.customer_email == ""
    assert not AuditEvent.objects.filter(action="item.customer_set").exists()

    client.force_login(people.reviewer)
    response = client.post(reverse("admin:compensation_compensationitem_decide", args=[email.pk]), {
        "decision": "set_customer", "customer_name": "Noor Haddad", "customer_email": "noor@customers.example",
        "reason": "the customer's address from the CRM"})
    assert response.status_code == 302
    email.refresh_from_db()
    assert email.valid and email.to == "noor@customers.example" and "Noor Haddad" in email.body
    assert email.facts["customer_set_by"] == people.reviewer.username
    assert AuditEvent.objects.filter(subject_id=str(email.pk), action="item.customer_set").exists()
    reject_item(item=email, actor=people.reviewer, reason="the customer asked us not to write", via="admin")
