"""Checks a draft (model output or a reviewer's edit) against what the ticket and the repair say.

A draft is untrusted text. It may be approved only when every check passes:
- the recipient is exactly the ticket's customer;
- money: never above what the customer paid, never above what the netting allows, never zero or
  negative, in the ticket's currency, a whole number of that currency's smallest unit (no fractional
  yen); amounts written in the text obey the same limits;
- the payment reference is the ticket's own;
- no markup, no script-capable URL schemes (javascript:, data:, vbscript:, file:), and no link, domain or
  email address that does not appear in the ticket itself;
- no header injection (line breaks in a subject), sane lengths.
The checks are deliberately strict: a false alarm costs a reviewer an edit, a miss sends the wrong text
or money to a customer.
"""
from __future__ import annotations

import re

from compensation.drafting.kinds import ITEM_KINDS
from babel.numbers import NumberFormatError, get_currency_precision, parse_decimal

from core.money import LOCALE, format_money, inexact_problem, locale_name

MAX_SUBJECT = 200
MAX_BODY = 4000

_MARKUP = re.compile(r"<\s*/?\s*[a-zA-Z!?]")
_SCHEMES = ("javascript:", "vbscript:", "data:", "file:")
_URL = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<>\"')\]]+")
_EMAIL = re.compile(r"(?i)[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+")
# A bare domain such as evil.example or pay-me.co/x: labels of letters/digits/hyphens, a letter TLD.
_DOMAIN = re.compile(r"(?i)(?<![@\w.-])(?:[a-z0-9-]+\.)+[a-z]{2,24}(?:/[^\s]*)?(?![\w@-])")
_CURRENCY_CODES = {
    "USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "NZD", "CNY", "HKD", "SGD", "SEK", "NOK", "DKK", "PLN",
    "CZK", "HUF", "INR", "BRL", "MXN", "ZAR", "TRY", "KRW", "RUB", "ILS", "AED", "SAR", "THB", "BTC", "ETH",
}
_SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "￥": "JPY", "₹": "INR", "₩": "KRW", "₽": "RUB",
            "₺": "TRY"}
_CURRENCY_WORDS = {"euro": "EUR", "euros": "EUR", "pound": "GBP", "pounds": "GBP", "sterling": "GBP", "yen": "JPY",
                   "franc": "CHF", "francs": "CHF", "rupee": "INR", "rupees": "INR", "bitcoin": "BTC"}
# Digits grouped and split the way any locale writes them ("1,234.50", "1.234,50", "1 234,50", "1’234.50"):
# which is which is the message's locale's call (_cents).
_NUMBER = r"\d(?:[\d,.\u00a0\u202f’']*\d)?"
_SYM = "".join(re.escape(s) for s in _SYMBOLS)
_MONEY = re.compile(
    rf"(?P<pre>[{_SYM}]|\b[A-Z]{{3}}\b)\s?(?P<n1>{_NUMBER})"
    rf"|(?P<n2>{_NUMBER})\s?(?P<post>[{_SYM}]|\b[A-Z]{{3}}\b|(?i:\b(?:{'|'.join(_CURRENCY_WORDS)})\b))"
)
_WORD_CURRENCY = re.compile(rf"(?i)\b({'|'.join(_CURRENCY_WORDS)})\b")


def _cents(number: str, locale: str | None = None) -> int | None:
    """Cents of an amount written in the message's locale (or en_US, as a reviewer may type it); one that
    reads in neither counts all its digits as whole units, so a miss can only raise a false alarm."""
    for name in dict.fromkeys((locale_name(locale), LOCALE)):
        try:
            return int(parse_decimal(number, locale=name, strict=True).scaleb(2).to_integral_value())
        except (NumberFormatError, ValueError, ArithmeticError):
            continue
    digits = "".join(c for c in number if c.isdigit())
    return int(digits) * 100 if digits else None


def _currency_of(token: str) -> str | None:
    if token in _SYMBOLS:
        return _SYMBOLS[token]
    if token.lower() in _CURRENCY_WORDS:
        return _CURRENCY_WORDS[token.lower()]
    return token if token in _CURRENCY_CODES else None


def text_problems(text: str, *, field: str, facts: dict) -> list[str]:
    """Problems in free text: markup, links and addresses not in the ticket, foreign money."""
    problems: list[str] = []
    if not text:
        return problems
    allowed = (facts.get("ticket_text") or "").lower()
    customer = (facts.get("customer_email") or "").lower()
    if _MARKUP.search(text):
        problems.append(f"{field}: contains markup (a plain-text draft has no tags)")
    squashed = re.sub(r"[\s\x00-\x1f]+", "", text).lower()
    for scheme in _SCHEMES:
        if scheme in squashed:
            problems.append(f"{field}: contains a {scheme} link")
    emails = {m.group(0).lower() for m in _EMAIL.finditer(text)}
    for address in sorted(emails):
        if address != customer and address not in allowed:
            problems.append(f"{field}: email address {address} is not in the ticket")
    without_emails = _EMAIL.sub(" ", text)
    for url in sorted({m.group(0) for m in _URL.finditer(without_emails)}):
        if url.lower().rstrip(".,;:!?") not in allowed:
            problems.append(f"{field}: link {url} is not in the ticket")
    for domain in sorted({m.group(0) for m in _DOMAIN.finditer(_URL.sub(" ", without_emails))}):
        if domain.lower().rstrip(".,;:!?") not in allowed:
            problems.append(f"{field}: web address {domain} is not in the ticket")
    currency = facts.get("currency", "USD")
    limits = _limits(facts)
    locale = facts.get("locale") or LOCALE
    for m in _MONEY.finditer(text):
        token = m.group("pre") or m.group("post")
        code = _currency_of(token)
        if code is None:
            continue  # a capitalised word before a number (e.g. "VIP 2"), not money
        if code not in limits:
            problems.append(f"{field}: mentions {m.group(0).strip()} in {code}; the ticket was paid in {currency}")
            continue
        cents, limit = _cents(m.group("n1") or m.group("n2"), locale), limits[code]
        if cents is not None and limit is not None and cents > _as_written(limit, code):
            problems.append(f"{field}: mentions {m.group(0).strip()}, more than the "
                            f"{format_money(limit, code)} the customer paid")
    for m in _WORD_CURRENCY.finditer(text):
        code = _CURRENCY_WORDS[m.group(1).lower()]
        if code not in limits and not any(code in p for p in problems):
            problems.append(f"{field}: mentions {m.group(1)}; the ticket was paid in {currency}")
    return problems


def _limits(facts: dict) -> dict[str, int | None]:
    """The most the text may name, per currency it may name: what the customer paid (or, refunded more
    than once, what left in total: a figure of the repair's own). A customer's message about several
    tickets (compensation.drafting.grouping) may name what their tickets in each currency paid together:
    a template's `$back` or `$refunded` is the total per currency (compensation.drafting.customer_message),
    and bounded by the largest ticket alone, any customer with two tickets in one currency got a message
    nobody could approve."""
    sections = facts.get("sections") or ()
    out: dict[str, int | None] = {}
    for part in sections if len(sections) > 1 else [facts]:
        code = part.get("currency") or facts.get("currency") or "USD"
        limit = part.get("paid_cents")
        if limit is not None and (part.get("refunded_cents") or 0) > limit:
            limit = part["refunded_cents"]
        if code not in out:
            out[code] = limit
        elif out[code] is not None:  # an unknown payment (no ticket) bounds nothing, as for one ticket
            out[code] = None if limit is None else out[code] + limit
    return out


def _as_written(cents: int, currency: str) -> int:
    """`cents` as format_money writes them (a currency without minor units shows ¥1,235 for 123450)."""
    digits = get_currency_precision(currency)
    if digits >= 2:
        return cents
    step = 10 ** (2 - digits)
    return (cents + step // 2) // step * step


def _recipient_problems(address: str, facts: dict, field: str) -> list[str]:
    expected = (facts.get("customer_email") or "").strip().lower()
    given = (address or "").strip().lower()
    if not given:
        return [f"{field}: no recipient"]
    if given != expected:
        return [f"{field}: recipient {address!r} is not the ticket's customer"]
    return []


def _money_problems(draft: dict, facts: dict) -> list[str]:
    problems = []
    amount = draft.get("amount_cents")
    currency = facts.get("currency")
    if not isinstance(amount, int) or isinstance(amount, bool):
        return ["amount: not an amount of money"]
    if amount <= 0:
        problems.append("amount: must be more than zero")
    # A reviewer reads the amount in the currency's own digits (¥1,235 for 123450) and a payment provider
    # takes it in them: an amount between two of its units is refused here, where a person can correct it.
    if problem := inexact_problem(amount, currency or ""):
        problems.append(f"amount: {problem}")
    paid = facts.get("paid_cents")
    if paid is not None and amount > paid:
        problems.append(f"amount: {format_money(amount, currency)} is above the {format_money(paid, currency)} "
                        "the customer paid")
    allowed = facts.get("max_cents")
    if allowed is not None and amount > allowed:
        problems.append(f"amount: {format_money(amount, currency)} is above the {format_money(allowed, currency)} "
                        "the netting allows")
    if (draft.get("currency") or "") != currency:
        problems.append(f"currency: {draft.get('currency')!r} is not the ticket's currency {currency}")
    return problems


def money_draft_problems(draft: dict, facts: dict) -> list[str]:
    """A refund reversal's or a replacement refund's draft: the money, the reference, the customer, the note."""
    problems = _money_problems(draft, facts)
    if (draft.get("payment_reference") or "") != (facts.get("payment_reference") or ""):
        problems.append("payment reference: not the ticket's original payment reference")
    problems += _recipient_problems(draft.get("to", ""), facts, "customer")
    problems += text_problems(draft.get("body", ""), field="note", facts=facts)
    if len(draft.get("body", "")) > MAX_BODY:
        problems.append(f"note: longer than {MAX_BODY} characters")
    return problems


def email_draft_problems(draft: dict, facts: dict) -> list[str]:
    """A customer email's draft: recipient, subject, body."""
    subject, body = draft.get("subject", ""), draft.get("body", "")
    problems = _recipient_problems(draft.get("to", ""), facts, "to")
    if not subject.strip():
        problems.append("subject: empty")
    if re.search(r"[\r\n\x00]", subject):
        problems.append("subject: contains a line break (header injection)")
    if len(subject) > MAX_SUBJECT:
        problems.append(f"subject: longer than {MAX_SUBJECT} characters")
    if not body.strip():
        problems.append("body: empty")
    if len(body) > MAX_BODY:
        problems.append(f"body: longer than {MAX_BODY} characters")
    problems += text_problems(subject, field="subject", facts=facts)
    problems += text_problems(body, field="body", facts=facts)
    if draft.get("amount_cents", 0) != 0:
        problems.append("amount: an email moves no money")
    return problems


def manual_draft_problems(draft: dict, facts: dict) -> list[str]:
    """A manual compensation's note: what a person has to do by hand. Nothing leaves through kintsugi, so
    only the note's own hygiene is checked (the reviewer's reason records what was done)."""
    body = draft.get("body", "")
    problems = [] if body.strip() else ["note: empty (say what has to be compensated by hand)"]
    if len(body) > MAX_BODY:
        problems.append(f"note: longer than {MAX_BODY} characters")
    if _MARKUP.search(body):
        problems.append("note: contains markup (a plain-text note has no tags)")
    # The amount is the effect's own (a person compensates it by hand; nothing leaves through kintsugi).
    carried = facts.get("effect_cents") or 0
    if draft.get("amount_cents", 0) != carried:
        problems.append("amount: a manual compensation carries the amount of the effect it compensates "
                        f"({format_money(carried, facts.get('currency') or 'USD')}), nothing else")
    return problems


def ticket_problems(kind: str, facts: dict) -> list[str]:
    """Whether the item still waits for its ticket (it was not in the workspace when drafted): an honest
    wait with the way out, not a failure. Money needs the ticket's payment reference; an email can go to
    a customer a reviewer named instead."""
    if not facts.get("ticket_missing"):
        return []
    ticket = facts.get("ticket")
    registration = ITEM_KINDS.get(kind)
    if registration is None or not registration.needs_ticket:
        return []
    if registration.moves_money:
        return [f"waiting for ticket {ticket}: it is not in the workspace, and money moves only against the "
                f"ticket's payment reference; add the ticket, then draft again"]
    if facts.get("customer_set_by"):
        return []
    return [f"waiting for ticket {ticket}: it is not in the workspace; add the ticket, then draft again, or "
            f"set the customer on this item"]


def validate_draft(*, kind: str, draft: dict, facts: dict) -> list[str]:
    """Every reason the draft may not be approved (empty when it may): the checks the item kind's
    spec names (compensation.drafting.kinds), then whether it still waits for its ticket."""
    registration = ITEM_KINDS.get(kind)
    if registration is None:
        return [f"unknown kind {kind!r}"]
    return registration.validate(draft, facts) + ticket_problems(kind, facts)
