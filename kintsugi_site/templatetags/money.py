"""`{% load money %}{{ item.amount_cents|money:item.currency }}` → "$75.00" (core.money)."""
from django import template

from core.money import format_money, input_amount

register = template.Library()


@register.filter(name="money")
def money(cents, currency: str = "USD") -> str:
    # Missing amounts (an email, a row without money) read as a dash rather than failing the page.
    if cents is None or cents == "":
        return "—"
    return format_money(int(cents), currency)


@register.filter(name="money_input")
def money_input(cents) -> str:
    """The value of a money <input>: "75.00" (the currency is named in its label)."""
    return input_amount(int(cents or 0))
