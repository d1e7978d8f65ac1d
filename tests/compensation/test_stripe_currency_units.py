"""Stripe counts `amount` in the currency's smallest unit (whole yen, thousandths of a dinar), kintsugi in
hundredths: what reaches Stripe (the real client against tests/fake_stripe.py) is the same money, and an
amount the currency cannot carry exactly is refused before anything is sent, never rounded."""
from __future__ import annotations

import pytest
from babel.numbers import get_currency_precision, list_currencies
from hypothesis import given, settings as hsettings, strategies as st

from compensation.delivery.connectors import PermanentFailure
from compensation.delivery.connectors.stripe_payments import Stripe
from compensation.delivery.execution import execute_item
from compensation.drafting.validation import money_draft_problems
from compensation.models import CompensationItem
from compensation.review.services import approve_item
from core import money
from tests.compensation.delivery_support import desk, fake_stripe, smtp_server  # noqa: F401

K, St = CompensationItem.Kind, CompensationItem.Status


def _item(desk, kind: str, currency: str, cents: int) -> CompensationItem:
    """A valid money item of the canonical desk's first reversal's ticket, as paid in `currency`."""
    base = desk.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    facts = {**base.facts, "currency": currency, "paid_cents": cents, "max_cents": cents}
    return CompensationItem.objects.create(
        incident=desk.incident, kind=kind, draft_key=f"test:{base.pk}:{kind}:{currency}", ticket_id=base.ticket_id,
        customer_email=base.customer_email, facts=facts, original=base.original, to=base.to, body="",
        payment_reference=base.payment_reference, amount_cents=cents, currency=currency, valid=True)


def _send(desk, item) -> CompensationItem:
    approve_item(item=item, actor=desk.people.reviewer, reason="checked", via="admin")
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.status == St.EXECUTED, item.delivery.failure_reason
    return item


@pytest.mark.parametrize("currency, cents, amount, shown", [("JPY", 123500, 1235, "¥1,235"),
                                                             ("USD", 7500, 7500, "$75.00"),
                                                             ("KRW", 5000000, 50000, "₩50,000")])
def test_a_refund_reaches_stripe_in_the_currencys_own_unit(desk, currency, cents, amount, shown):
    item = _send(desk, _item(desk, K.REPLACEMENT_REFUND, currency, cents))
    assert desk.stripe.objects["refund"][item.delivery.reference]["amount"] == amount
    assert money.format_money(item.amount_cents, currency) == shown  # what the reviewer approved


def test_a_three_decimal_invoice_goes_in_thousandths_ending_in_zero(desk):
    item = _send(desk, _item(desk, K.REFUND_REVERSAL, "KWD", 1234))  # KWD 12.34
    invoice = desk.stripe.objects["invoice"][item.delivery.reference]
    assert invoice["amount_due"] == 12340
    [line] = desk.stripe.objects["invoiceitem"].values()
    assert line["amount"] == 12340 and line["currency"] == "kwd"


def test_a_fractional_yen_amount_is_refused_for_the_reviewer_and_never_sent(desk):
    item = _item(desk, K.REPLACEMENT_REFUND, "JPY", 123450)  # ¥1,234.50, which reads ¥1,235
    problems = money_draft_problems({"amount_cents": 123450, "currency": "JPY", "to": item.to, "body": "",
                                     "payment_reference": item.payment_reference}, item.facts)
    assert any("1234.50 JPY cannot be paid exactly" in p and "¥1,235" in p for p in problems), problems
    # The connector refuses it too (an item from before the drafting check, or any other way in),
    # before it opens a connection.
    with pytest.raises(PermanentFailure, match=r"1234\.50 JPY cannot be paid exactly"):
        Stripe().send(item, {})
    assert not desk.stripe.requests


def test_the_drafting_check_lets_whole_amounts_through():
    facts = {"currency": "JPY", "paid_cents": 123500, "customer_email": "a@example.com", "payment_reference": "ch_1"}
    draft = {"amount_cents": 123500, "currency": "JPY", "to": "a@example.com", "body": "",
             "payment_reference": "ch_1"}
    assert money_draft_problems(draft, facts) == []


CODES = sorted(set(list_currencies()) | money.STRIPE_ZERO_DECIMAL | money.STRIPE_THREE_DECIMAL | {"XYZ"})


@hsettings(max_examples=400, deadline=None)
@given(st.sampled_from(CODES), st.integers(min_value=0, max_value=10**15))
def test_the_conversion_is_exact_or_refused(currency, cents):
    try:
        amount = money.minor_units(cents, currency)
    except money.InexactAmount:
        assert not money.exact_in_currency(cents, currency)
        assert get_currency_precision(currency) < 2 and cents % 100
        return
    assert money.cents_of_minor_units(amount, currency) == cents  # nothing lost, nothing rounded
    if currency in money.STRIPE_THREE_DECIMAL:
        assert amount % 10 == 0  # Stripe's rule for the last digit
    # the same money as the reviewer read it
    assert money.amount_of(money.format_money(cents, currency), currency) * 100 == cents


def test_stripes_lists_are_babels_digits_and_the_exceptions_are_named():
    for code in money.STRIPE_ZERO_DECIMAL:
        assert get_currency_precision(code) == 0, code
    for code in money.STRIPE_THREE_DECIMAL:
        assert get_currency_precision(code) == 3, code
    # Whole units to babel, hundredths to Stripe: sent as hundredths, refused unless whole.
    assert money.minor_units(123400, "ISK") == 123400
    with pytest.raises(money.InexactAmount):
        money.minor_units(123450, "ISK")
    assert money.minor_units(12345, "LYD") == 12345  # three digits to babel, two to Stripe
