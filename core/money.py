"""Money as people read it: one formatting for every admin page, report, message and API text.

Amounts are stored and exchanged as integer hundredths of the currency's unit (`amount_cents`, the
ledger's and the tickets' convention, and the public JSON keys); only what a person reads goes through
`format_money`. JSON keeps the integers, with the unit in the key.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from functools import lru_cache

from babel import Locale, UnknownLocaleError
from babel.numbers import (NumberFormatError, format_currency, get_currency_precision, get_currency_symbol,
                           parse_decimal)

# One locale for every page and report, so a reviewer and the PDF an auditor reads show the same text.
# A customer's message is written in the customer's own (`locale`, compensation.drafting.customer_message).
LOCALE = "en_US"


def format_money(cents: int, currency: str, locale: str = LOCALE) -> str:
    """`7500, "USD"` → "$75.00", `7500, "EUR"` → "€75.00", `-7500, "USD"` → "-$75.00" (babel, en_US);
    `123450, "EUR", locale="de_DE"` → "1.234,50 €" (a no-break space before the sign).

    Limits: `cents` is hundredths of the unit for every currency (the storage convention), so a currency
    with fewer minor digits (JPY) is rounded to its own precision; an unknown code is printed as given
    ("XYZ75.00"). A negative amount keeps its sign: a sum that went below zero must be seen, not hidden.
    """
    if isinstance(cents, bool) or not isinstance(cents, int):
        raise TypeError(f"money is an integer number of cents, not {type(cents).__name__}")
    return _formatted(int(cents), (currency or "").upper(), locale_name(locale))


# Babel's formatting costs ~0.3 ms a call and a page of 50 cases asks for 100 or more amounts, mostly the
# same few: the text depends on the three arguments alone, so it is kept.
@lru_cache(maxsize=8192)
def _formatted(cents: int, currency: str, locale: str) -> str:
    # Rounded half up to the currency's own digits (¥1,234.50 reads ¥1,235), as people round money; babel
    # would round half to even. Currencies with two or more digits are never rounded.
    exponent = Decimal(1).scaleb(-get_currency_precision(currency))
    exact = Context(prec=max(28, len(str(abs(cents))) + 8))  # no amount is too long to write whole
    amount = Decimal(cents).scaleb(-2, context=exact).quantize(exponent, rounding=ROUND_HALF_UP, context=exact)
    with localcontext(exact):  # babel's own arithmetic on it too
        return format_currency(amount, currency, locale=locale)


@lru_cache(maxsize=256)
def locale_name(value: str | None) -> str:
    """`value` as babel names it ("de-de" → "de_DE"); LOCALE for an empty or unknown one, so a stored
    locale babel no longer knows still writes money (in LOCALE) instead of failing a message."""
    try:
        return str(Locale.parse((value or "").strip().replace("-", "_"))) if (value or "").strip() else LOCALE
    except (UnknownLocaleError, ValueError, TypeError):
        return LOCALE


def valid_locale(value: str) -> str:
    """A locale a person typed, as babel names it; ValueError for one babel does not know."""
    text = (value or "").strip().replace("-", "_")
    try:
        return str(Locale.parse(text))
    except (UnknownLocaleError, ValueError, TypeError):
        raise ValueError(f"unknown locale {value!r} (write it as language_TERRITORY, e.g. en_US or de_DE)") from None


_SPACES, _MINUS = " \u00a0\u202f\u2009", "-\u2212"
_MARKS = str.maketrans("", "", "\u200e\u200f\u061c")  # the direction marks some locales put around numbers


def amount_of(text: str, currency: str, locale: str = LOCALE) -> Decimal:
    """The amount in `text` as format_money wrote it for `currency` and `locale`: the inverse of the
    formatting, for checks that nothing was lost (NumberFormatError when `text` is not such an amount)."""
    locale = locale_name(locale)
    number = text.translate(_MARKS)
    for mark in sorted({get_currency_symbol(currency, locale), currency}, key=len, reverse=True):
        number = number.replace(mark.translate(_MARKS), "")
    number = number.strip(_SPACES)
    negative = number[:1] in _MINUS or number[-1:] in _MINUS  # some locales write the sign after the number
    number = number.strip(_MINUS).strip(_SPACES)
    if not number or not number[0].isdigit() or not number[-1].isdigit():
        raise NumberFormatError(f"{text!r} is not an amount in {currency} ({locale})")
    with localcontext(Context(prec=max(28, len(number) + 8))):  # the strict check formats it again
        try:
            value = parse_decimal(number, locale=locale, strict=True)
        except NumberFormatError:
            # Babel writes some locales' currency amounts grouped by thousands but parses them strictly by
            # their lakh grouping (or_IN, ml_IN): read the digits without the grouping check.
            value = parse_decimal(number, locale=locale)
        return -value if negative else value


class InexactAmount(ValueError):
    """An amount of hundredths that the currency cannot carry exactly (¥1,234.50: yen have no minor
    unit). Money is never rounded on its way out: the item is refused for a person to correct."""


def exact_in_currency(cents: int, currency: str) -> bool:
    """Whether `cents` is a whole number of the currency's own smallest unit (babel's digits, those
    format_money writes): 123500 JPY is ¥1,235 exactly, 123450 JPY is not (format_money shows ¥1,235)."""
    digits = min(get_currency_precision((currency or "").upper()), 2)
    return cents % 10 ** (2 - digits) == 0


def inexact_problem(cents: int, currency: str) -> str | None:
    """The reviewer's words for an amount exact_in_currency refuses, or None when it is exact."""
    if exact_in_currency(cents, currency):
        return None
    code = (currency or "").upper()
    unit = "whole units" if get_currency_precision(code) == 0 else "tenths"
    return (f"{input_amount(cents)} {code} cannot be paid exactly: {code} is counted in {unit} "
            f"(it would read {format_money(cents, code)})")


# Stripe's `amount` counts the currency's smallest unit as Stripe defines it, which is ISO's (and babel's)
# except where its docs say otherwise: https://docs.stripe.com/currencies ("Minor units in API amounts",
# "Zero-decimal", "Three-decimal", "Special cases"). Babel agrees on every code of these two lists.
STRIPE_ZERO_DECIMAL = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split())
# Stripe requires the last digit of a three-decimal amount to be 0: hundredths ×10 always end in 0.
STRIPE_THREE_DECIMAL = frozenset("BHD JOD KWD OMR TND".split())
# Every other currency is two-decimal to Stripe ("unless otherwise noted"), even where ISO/babel count
# none (ISK, IQD, LAK, ...: Stripe takes ISK as hundredths divisible by 100) or three (LYD): those
# amounts go as hundredths, and exact_in_currency keeps them whole where babel says the unit is whole.


def minor_units(cents: int, currency: str) -> int:
    """kintsugi's hundredths of `currency` as Stripe's `amount`: 123500 JPY → 1235 (¥1,235), 7500 USD →
    7500 ($75.00), 1230 KWD → 12300 (KWD 12.300). InexactAmount when the currency cannot carry the
    amount exactly (123450 JPY, ¥1,234.50), so nothing is sent rounded."""
    if isinstance(cents, bool) or not isinstance(cents, int):
        raise TypeError(f"money is an integer number of cents, not {type(cents).__name__}")
    code = (currency or "").upper()
    problem = inexact_problem(cents, code)
    if problem or (code in STRIPE_ZERO_DECIMAL and cents % 100):
        raise InexactAmount(problem or f"{input_amount(cents)} {code} is not a whole amount of {code}")
    if code in STRIPE_ZERO_DECIMAL:
        return cents // 100
    if code in STRIPE_THREE_DECIMAL:
        return cents * 10
    return cents


def cents_of_minor_units(amount: int, currency: str) -> int:
    """Stripe's `amount` in `currency` as kintsugi's hundredths (minor_units' inverse); InexactAmount for
    a three-decimal amount with a thousandth (KWD 12.345), which hundredths cannot hold."""
    code = (currency or "").upper()
    if code in STRIPE_ZERO_DECIMAL:
        return amount * 100
    if code in STRIPE_THREE_DECIMAL:
        if amount % 10:
            raise InexactAmount(f"{amount} thousandths of {code} is not a whole number of hundredths")
        return amount // 10
    return amount


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
