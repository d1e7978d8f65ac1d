"""Approved items leave through real connectors: SMTP (aiosmtpd on loopback) and Stripe (the real
client against tests/fake_stripe.py). Exactly once across crashes, provider errors and retries."""
from __future__ import annotations

import pytest

from compensation.drafting import kinds
from compensation.delivery import deliveries
from compensation.delivery.connectors import TemporaryFailure
from compensation.delivery.connectors.smtp import message_id
from compensation.delivery_models import Delivery, DeliveryState
from compensation.delivery.execution import execute_item
from compensation.models import CompensationItem
from compensation.review.services import approve_item, bulk_approve, reject_item
from tests.compensation.delivery_support import desk, fake_stripe, smtp_server  # noqa: F401

K, St, S = CompensationItem.Kind, CompensationItem.Status, DeliveryState


class Crash(BaseException):
    """A worker killed at this point: nothing after it runs (BaseException: no `except Exception` sees it)."""


def _execute_all(incident) -> None:
    # Money first, then the emails that explain it (an email waits for its money item).
    for _ in range(2):
        for item in incident.compensation_items.filter(status=St.APPROVED).order_by("pk"):
            execute_item(item_id=item.pk)


def _replacement_refund(desk) -> CompensationItem:
    """A held replacement refund (the canonical desk nets its one into a reversal): a copy of a reversal's
    ticket, paying back part of the original payment."""
    base = desk.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    return CompensationItem.objects.create(
        incident=desk.incident, kind=K.REPLACEMENT_REFUND, draft_key=f"test:{base.pk}:replacement",
        ticket_id=base.ticket_id, customer_email=base.customer_email, facts=base.facts, original=base.original,
        to=base.to, payment_reference=base.payment_reference, amount_cents=min(2500, base.amount_cents), currency=base.currency, valid=True)


def _approve(desk, item) -> CompensationItem:
    return approve_item(item=item, actor=desk.people.reviewer, reason="checked", via="admin")


def test_every_approved_item_leaves_once_through_smtp_and_stripe_and_nothing_else_does(desk):
    items = list(desk.incident.compensation_items.filter(valid=True).order_by("pk"))
    rejected = next(i for i in items if i.kind == K.CORRECTION_EMAIL)
    reject_item(item=rejected, actor=desk.people.reviewer, reason="we phone this customer", via="admin")
    approved = [i for i in items if i.pk != rejected.pk]
    assert not desk.smtp.mailbox.messages and not desk.stripe.requests, "nothing leaves before approval"
    result = bulk_approve(items=approved, actor=desk.people.reviewer, reason="checked", via="admin")
    assert not result.refused
    _execute_all(desk.incident)
    _execute_all(desk.incident)  # a second sweep sends nothing again

    emails = [i for i in approved if i.kind in kinds.MESSAGES]
    got = {m["Message-ID"]: m for m in desk.smtp.mailbox.messages}
    assert len(desk.smtp.mailbox.messages) == len(emails) == len(got)
    for item in emails:
        item.refresh_from_db()
        message = got[message_id(item)]
        assert message["To"] == item.customer_email and message["Subject"] == item.subject
        assert message["X-Kintsugi-Idempotency"] == item.execution_key
        assert item.status == St.EXECUTED and item.delivery.state == S.ACCEPTED
        assert item.delivery.reference == message_id(item) and item.delivery.accepted_at is not None
    assert rejected.customer_email not in [m["To"] for m in desk.smtp.mailbox.messages] or \
        any(i.customer_email == rejected.customer_email for i in emails)

    reversals = [i for i in approved if i.kind == K.REFUND_REVERSAL]
    refunds = [i for i in approved if i.kind == K.REPLACEMENT_REFUND]
    assert reversals and emails
    invoices = desk.stripe.objects["invoice"]
    assert len(invoices) == len(reversals) and len(desk.stripe.objects["refund"]) == len(refunds)
    for item in reversals:
        item.refresh_from_db()
        invoice = invoices[item.delivery.reference]
        assert invoice["amount_due"] == item.amount_cents and invoice["status"] == "open"
        assert invoice["metadata"]["kintsugi_item"] == str(item.pk)
        assert item.delivery.state == S.PENDING  # sent to the customer, not paid yet
    for item in refunds:
        item.refresh_from_db()
        refund = desk.stripe.objects["refund"][item.delivery.reference]
        assert refund["amount"] == item.amount_cents and item.delivery.state == S.SUCCEEDED
    keys = [r["key"] for r in desk.stripe.requests]
    assert all(keys) and all(k.startswith("compensation:") for k in keys)


@pytest.mark.parametrize("point", ["before the request", "after the request", "before the answer is stored"])
def test_a_worker_killed_at_each_point_delivers_the_reversal_exactly_once(desk, monkeypatch, point):
    from compensation.delivery.connectors import stripe_payments

    item = desk.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    _approve(desk, item)
    real_invoice, real_store = stripe_payments._invoice, deliveries.transaction.atomic

    def invoice_then_crash(c, it, *amount):
        if point == "before the request":
            raise Crash()
        real_invoice(c, it, *amount)
        raise Crash()

    monkeypatch.setattr(stripe_payments, "_invoice", invoice_then_crash if point != "before the answer is stored"
                        else real_invoice)
    if point == "before the answer is stored":
        real_send = deliveries.send

        def send_then_crash(it):
            real_send(it)
            raise Crash()

        monkeypatch.setattr("compensation.delivery.execution.deliveries.send", send_then_crash)
    with pytest.raises(Crash):
        execute_item(item_id=item.pk)
    monkeypatch.undo()
    assert real_store is deliveries.transaction.atomic
    execute_item(item_id=item.pk)  # the resumed worker
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.status == St.EXECUTED
    assert len(desk.stripe.objects["invoice"]) == 1 and len(desk.stripe.objects["customer"]) == 1
    assert list(desk.stripe.objects["invoice"]) == [item.delivery.reference]


@pytest.mark.parametrize("fault", ["500", "hang"])
def test_stripe_failing_or_timing_out_is_retried_and_refunds_once(desk, fault):
    item = _replacement_refund(desk)
    _approve(desk, item)
    desk.stripe.fault(fault)
    with pytest.raises(TemporaryFailure):
        execute_item(item_id=item.pk)
    delivery = Delivery.objects.get(item=item)
    assert delivery.state == S.RETRYING and delivery.attempts == 1
    assert delivery.attempt_log.get().status_code in (500, None)
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.status == St.EXECUTED and item.delivery.attempts == 2
    assert len(desk.stripe.objects["refund"]) == 1  # the first request's refund, answered again


def test_a_card_refusal_fails_the_item_for_a_person_and_the_case_reopens(desk):
    from compensation.review import cases

    item = _replacement_refund(desk)
    _approve(desk, item)
    desk.stripe.fault("refuse")
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.status == St.APPROVED and item.delivery.state == S.FAILED
    assert item.delivery.failure_reason == "Stripe refused: expired_card"
    case = cases.case(user=desk.people.reviewer, incident_id=item.incident_id, ticket=item.ticket_id)
    assert case.state == cases.CaseState.DELIVERY_FAILED
    execute_item(item_id=item.pk)  # no retry sends it: a person decides
    assert not desk.stripe.objects["refund"]


def test_a_mail_server_outage_heals_and_a_permanent_refusal_keeps_the_code_never_the_servers_words(desk, settings):
    money = desk.incident.compensation_items.filter(kind__in=kinds.MONEY, valid=True)
    bulk_approve(items=list(money), actor=desk.people.reviewer, reason="checked", via="admin")
    _execute_all(desk.incident)
    first, second = desk.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True).order_by("pk")[:2]
    _approve(desk, first)
    _approve(desk, second)
    desk.smtp.stop()
    with pytest.raises(TemporaryFailure):
        execute_item(item_id=first.pk)
    assert Delivery.objects.get(item=first).state == S.RETRYING
    desk.smtp.start()
    desk.smtp.mailbox.answers = ["451 4.3.0 Try again later"]
    Delivery.objects.filter(item=first).update(next_attempt_at=None)
    with pytest.raises(TemporaryFailure):
        execute_item(item_id=first.pk)
    Delivery.objects.filter(item=first).update(next_attempt_at=None)
    execute_item(item_id=first.pk)
    assert len(desk.smtp.mailbox.messages) == 1 and Delivery.objects.get(item=first).attempts == 3
    desk.smtp.mailbox.answers = ["550 5.1.1 <x@customers.example>: mailbox unavailable"]
    execute_item(item_id=second.pk)
    delivery = Delivery.objects.get(item=second)
    assert delivery.state == S.FAILED and delivery.failure_reason == "mail server refused: 550"
    assert "mailbox unavailable" not in " ".join(delivery.attempt_log.values_list("detail", flat=True))
    assert len(desk.smtp.mailbox.messages) == 1


def test_an_smtp_send_cut_off_mid_answer_is_uncertain_never_repeated_until_a_person_says(desk, monkeypatch):
    from compensation.delivery.connectors import smtp

    money = desk.incident.compensation_items.filter(kind__in=kinds.MONEY, valid=True)
    bulk_approve(items=list(money), actor=desk.people.reviewer, reason="checked", via="admin")
    _execute_all(desk.incident)
    item = desk.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True).order_by("pk").first()
    _approve(desk, item)
    real = smtp.Smtp.send

    def send_then_crash(self, it, options):
        real(self, it, options)
        raise Crash()

    monkeypatch.setattr(smtp.Smtp, "send", send_then_crash)
    with pytest.raises(Crash):
        execute_item(item_id=item.pk)
    monkeypatch.undo()
    execute_item(item_id=item.pk)
    delivery = Delivery.objects.get(item=item)
    assert delivery.state == S.UNCERTAIN and len(desk.smtp.mailbox.messages) == 1
    with pytest.raises(deliveries.DeliveryRefused):
        deliveries.deliver_again(item=item, actor=desk.people.reviewer, reason="", via="admin")
    deliveries.deliver_again(item=item, actor=desk.people.reviewer, reason="not in the customer's mailbox",
                             via="admin")
    execute_item(item_id=item.pk)
    assert len(desk.smtp.mailbox.messages) == 2 and Delivery.objects.get(item=item).state == S.ACCEPTED
    assert desk.incident.audit_events.filter(action="item.delivery_retried").count() == 1
