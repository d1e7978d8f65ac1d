"""core.money: the one way money is written for people, and read back from a review form."""
import pytest
from django.template import Context, Template

from core.money import format_money, format_totals, input_amount, parse_money


@pytest.mark.parametrize("cents, currency, text", [
    (7500, "USD", "$75.00"),
    (7500, "EUR", "€75.00"),
    (7550, "GBP", "£75.50"),
    (0, "USD", "$0.00"),
    (5, "USD", "$0.05"),
    (123_456_789_012, "USD", "$1,234,567,890.12"),
    (7500, "usd", "$75.00"),  # codes are read case-insensitively
    (7500, "", "75.00"),  # no known currency: a plain amount, never cents
])
def test_format_money_writes_amounts_as_money(cents, currency, text):
    assert format_money(cents, currency) == text


def test_a_negative_amount_keeps_its_sign():
    assert format_money(-7500, "USD") == "-$75.00"


@pytest.mark.parametrize("value", [75.0, "7500", None, True])
def test_format_money_refuses_anything_but_integer_cents(value):
    with pytest.raises(TypeError):
        format_money(value, "USD")


def test_totals_per_currency_read_as_one_line():
    assert format_totals({"EUR": 500, "USD": 7500}) == "€5.00, $75.00"
    assert format_totals([{"currency": "USD", "cents": 40000}]) == "$400.00"
    assert format_totals({}) == "no money" and format_totals({}, empty="") == ""


@pytest.mark.parametrize("text, cents", [("75", 7500), ("75.5", 7550), ("75.05", 7505), ("$1,234.50", 123450),
                                         (" 0.99 ", 99), ("x", None), ("75.123", None), ("-5", None), ("", None),
                                         ("7.5.0", None)])
def test_parse_money_reads_what_a_reviewer_types(text, cents):
    assert parse_money(text) == cents


def test_input_amount_round_trips_through_parse_money():
    assert input_amount(7505) == "75.05" and parse_money(input_amount(7505)) == 7505


def test_money_template_filter():
    template = Template("{% load money %}{{ cents|money:currency }}|{{ none|money:currency }}|{{ cents|money_input }}")
    assert template.render(Context({"cents": 17000, "currency": "EUR", "none": None})) == "€170.00|—|170.00"
