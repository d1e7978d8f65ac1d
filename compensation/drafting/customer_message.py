"""The one message a customer gets about an incident: what we take back or pay, and the corrected answer,
written for the customer (no internal ids, money as the customer reads it), from a template.

A template is a subject and a body with `$name` placeholders (string.Template): a closed set, listed in
PLACEHOLDERS; a template naming anything else is refused when it is saved (`template_problems`), so
rendering never meets an unknown name. Substitution is one pass over the template: a value (the
customer's name, the corrected answer an agent wrote) is inserted as text and never read as a template
or as code, so `$back` or `{{ … }}` inside a customer's name stays those characters. Pages escape the
rendered text like any other untrusted text; the email is plain text.

Each workspace may keep its own template (compensation.drafting.templates); DEFAULT is the desk's own.

One customer, several tickets (compensation.drafting.grouping): the facts carry one section per ticket,
and `$explanation` becomes a numbered entry per ticket (the customer's own subject and what the order
cost, never a ticket id), each with its correction and its corrected answer; `$corrected_answer` is
then empty (each answer is in its entry), and `$refunded`, `$kept` and `$back` are the totals per
currency. A section whose money item a reviewer rejected (`money_refused`) says the refund stays as it
is: the message says only what actually happens (compensation.delivery.grouped_messages rewrites it).

Money is written in the customer's locale (`facts["locale"]`: the ticket's, else the workspace's, else
KINTSUGI_MESSAGE_LOCALE), e.g. 1.234,50 € for de_DE: core.money.format_money.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

from core.money import LOCALE, format_money

# name -> what it holds, for the editor's help text and the docs
PLACEHOLDERS: dict[str, str] = {
    "customer": "the customer's name, as on their ticket (\"there\" when unknown)",
    "explanation": "what changed and what happens to the money, in one paragraph (a numbered entry per ticket "
                   "when the customer has several)",
    "corrected_answer": "the corrected answer to the customer's request, quoted; empty when there is none (and "
                        "for several tickets: each answer is in its entry)",
    "refunded": "what was refunded before, e.g. $110.00 (in the customer's locale; totals for several tickets)",
    "kept": "the refund the customer keeps (the correct one), e.g. $55.00",
    "back": "what is asked back, e.g. $55.00",
    "team": "the workspace's name",
}
MAX_TEMPLATE = 3000


@dataclass(frozen=True)
class Template:
    subject: str
    body: str


DEFAULT = Template(
    subject="A correction to our earlier message",
    body=("Hello $customer,\n\n$explanation\n\n$corrected_answer\n\n"
          "We are sorry for the confusion."),
)


def template_problems(subject: str, body: str) -> list[str]:
    """Why a template cannot be used: a placeholder outside PLACEHOLDERS, a stray `$`, a subject that
    would break the mail header, an empty or overlong text."""
    problems = []
    for field, text in (("subject", subject), ("body", body)):
        if not (text or "").strip():
            problems.append(f"{field}: empty")
            continue
        if len(text) > MAX_TEMPLATE:
            problems.append(f"{field}: longer than {MAX_TEMPLATE} characters")
        tpl = string.Template(text)
        if not tpl.is_valid():
            problems.append(f"{field}: a '$' that starts no placeholder (write $$ for a dollar sign)")
            continue
        unknown = sorted(set(tpl.get_identifiers()) - set(PLACEHOLDERS))
        if unknown:
            problems.append(f"{field}: unknown placeholder {', '.join('$' + u for u in unknown)} "
                            f"(allowed: {', '.join('$' + p for p in PLACEHOLDERS)})")
    if any(c in (subject or "") for c in "\r\n\x00"):
        problems.append("subject: contains a line break")
    return problems


def _money(cents, currency: str, locale: str = LOCALE) -> str:
    return format_money(int(cents or 0), currency or "USD", locale=locale or LOCALE)


def explanation(facts: dict, locale: str | None = None) -> str:
    """The paragraph that explains the reversal and the corrected answer together, by situation."""
    if len(facts.get("sections") or ()) > 1:
        return _sections(facts)
    locale = locale or facts.get("locale") or LOCALE
    cur = facts.get("currency") or "USD"
    refunded, kept = _money(facts.get("refunded_cents"), cur, locale), _money(facts.get("replacement_cents"), cur, locale)
    back = _money(facts.get("reverse_cents"), cur, locale)
    situation = facts.get("situation", "")
    earlier = "Our earlier message to you"
    if facts.get("money_refused") and situation in MONEY_SITUATIONS:
        return (f"{earlier} confirmed a refund of {refunded}. It followed a policy that was not ours; your refund "
                f"stays as it is all the same, and nothing changes for you.")
    if situation == "refund_reduced":
        return (f"{earlier} confirmed a refund of {refunded}. That refund followed a policy that was not ours. "
                f"Under our refund policy your order qualifies for a refund of {kept}: you keep {kept}, and we "
                f"will ask for the difference of {back} back.")
    if situation == "refund_withdrawn":
        return (f"{earlier} confirmed a refund of {refunded}. That refund followed a policy that was not ours, "
                f"and your order does not qualify for a refund under our refund policy, so we will ask for "
                f"{back} back.")
    if situation == "refund_increased":
        return (f"{earlier} confirmed a refund of {refunded}. The correct refund is {kept}; we will pay the "
                f"difference to your original payment method.")
    if situation == "refund_unchanged":
        return (f"{earlier} followed a policy that was not ours. Your refund of {refunded} is correct all the "
                f"same, and nothing changes for you.")
    if situation == "message_corrected":
        return f"{earlier} followed a policy that was not ours and was wrong. Please disregard it."
    return "Please disregard our earlier message to you: it followed a policy that was not ours."


MONEY_SITUATIONS = ("refund_reduced", "refund_withdrawn", "refund_increased")


def corrected_answer(facts: dict) -> str:
    """The corrected answer an agent wrote (untrusted text, validated with the draft), introduced."""
    if len(facts.get("sections") or ()) > 1:
        return ""  # each ticket's answer is in its own entry of the explanation
    body = (facts.get("corrected_body") or "").strip()
    if not body:
        return ""
    return f"Here is {'our answer' if facts.get('kind') == 'replacement_email' else 'our corrected answer'}:\n\n{body}"


def _sections(facts: dict) -> str:
    """One numbered entry per ticket of a customer's message about several tickets: which request (the
    customer's own subject and what the order cost), its correction, and its corrected answer."""
    locale = facts.get("locale") or LOCALE
    sections = facts["sections"]
    out = [f"We are writing about {len(sections)} of your requests at once."]
    for n, section in enumerate(sections, start=1):
        subject = " ".join((section.get("ticket_subject") or "").split())
        paid = section.get("paid_cents")
        head = f"{n}. About your request" + (f" \u201c{subject}\u201d" if subject else "") + (
            f" (an order of {_money(paid, section.get('currency'), locale)})" if paid else "") + ":"
        words = "" if section.get("kind") == "replacement_email" else explanation(section, locale)
        out.append(f"{head}\n{words}".rstrip())
        answer = corrected_answer(section)
        if answer:
            out.append(answer)
    return "\n\n".join(out)


def _totals(facts: dict, key: str) -> str:
    """A placeholder's amount: the facts' own, or a grouped message's total per currency."""
    locale = facts.get("locale") or LOCALE
    if len(facts.get("sections") or ()) <= 1:
        return _money(facts.get(key), facts.get("currency") or "USD", locale)
    sums: dict[str, int] = {}
    for section in facts["sections"]:
        cur = section.get("currency") or facts.get("currency") or "USD"
        sums[cur] = sums.get(cur, 0) + int(section.get(key) or 0)
    return " and ".join(_money(cents, cur, locale) for cur, cents in sorted(sums.items()))


def values(facts: dict, *, team: str = "") -> dict[str, str]:
    return {
        "customer": (facts.get("customer") or "").strip() or "there",
        "explanation": explanation(facts),
        "corrected_answer": corrected_answer(facts),
        "refunded": _totals(facts, "refunded_cents"),
        "kept": _totals(facts, "replacement_cents"),
        "back": _totals(facts, "reverse_cents"),
        "team": team,
    }


def render(template: Template, facts: dict, *, team: str = "") -> tuple[str, str]:
    """(subject, body) of the customer's message: `template` filled from `facts` in one pass. Blank lines
    left by an empty placeholder (no corrected answer) are folded away."""
    filled = values(facts, team=team)
    subject = " ".join(string.Template(template.subject).substitute(filled).split())
    sections = facts.get("sections") or ()
    if len(sections) > 1 and not any(s.get("kind") == "correction_email" for s in sections):
        # New answers only, nothing of ours to correct: the first answer's own subject, not "a correction".
        subject = " ".join((sections[0].get("corrected_subject") or "").split()) or subject
    body = string.Template(template.body).substitute(filled)
    paragraphs = [p.strip("\n") for p in body.split("\n\n")]
    return subject, "\n\n".join(p for p in paragraphs if p.strip())
