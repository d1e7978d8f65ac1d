"""Money as people read it: one formatting for every admin page, report, message and API text.

Amounts are stored and exchanged as integer hundredths of the currency's unit (`amount_cents`, the
ledger's and the tickets' convention, and the public JSON keys); only what a person reads goes through
`format_money`. JSON keeps the integers, with the unit in the key.
"""
from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

from babel.numbers import format_currency

# One locale for every page and report, so a reviewer and the PDF an auditor reads show the same text.
LOCALE = "en_US"


def format_money(cents: int, currency: str) -> str:
    """`7500, "USD"` → "$75.00", `7500, "EUR"` → "€75.00", `-7500, "USD"` → "-$75.00" (babel, en_US).

    Limits: `cents` is hundredths of the unit for every currency (the storage convention), so a currency
    with fewer minor digits (JPY) is rounded to its own precision; an unknown code is printed as given
    ("XYZ75.00"). A negative amount keeps its sign: a sum that went below zero must be seen, not hidden.
    """
    if isinstance(cents, bool) or not isinstance(cents, int):
        raise TypeError(f"money is an integer number of cents, not {type(cents).__name__}")
    return _formatted(int(cents), (currency or "").upper())


# Babel's formatting costs ~0.3 ms a call and a page of 50 cases asks for 100 or more amounts, mostly the
# same few: the text depends on the two arguments alone, so it is kept.
@lru_cache(maxsize=8192)
def _formatted(cents: int, currency: str) -> str:
    return format_currency(Decimal(cents) / 100, currency, locale=LOCALE)


def format_totals(totals: dict[str, int] | list[dict], *, empty: str = "no money") -> str:
    """Totals per currency as one line: `{"EUR": 500, "USD": 7500}` → "€5.00, $75.00"; also takes the
    `[{"currency": …, "cents": …}]` rows the queue totals return."""
    pairs = totals.items() if isinstance(totals, dict) else ((r["currency"], r["cents"]) for r in totals)
    text = ", ".join(format_money(int(cents), currency) for currency, cents in pairs)
    return text or empty


def parse_money(text: str) -> int | None:
    """What a person typed as an amount ("75", "75.5", "$1,234.50") as integer cents; None when it is
    not one (a third decimal, letters, a sign), so the caller refuses it rather than guessing."""
    cleaned = (text or "").strip().lstrip("$€£").replace(",", "").strip()
    whole, _, fraction = cleaned.partition(".")
    if not whole.isdigit() or len(fraction) > 2 or (fraction and not fraction.isdigit()):
        return None
    return int(whole) * 100 + int(fraction.ljust(2, "0") or 0)


def input_amount(cents: int) -> str:
    """Cents as an editable amount in the unit ("7500" → "75.00"): the value of a money input."""
    return f"{Decimal(cents) / 100:.2f}"
