"""The one message a customer gets about an incident: what we take back or pay, and the corrected answer,
written for the customer (no internal ids, money as the customer reads it), from a template.

A template is a subject and a body with `$name` placeholders (string.Template): a closed set, listed in
PLACEHOLDERS; a template naming anything else is refused when it is saved (`template_problems`), so
rendering never meets an unknown name. Substitution is one pass over the template: a value (the
customer's name, the corrected answer an agent wrote) is inserted as text and never read as a template
or as code, so `$back` or `{{ … }}` inside a customer's name stays those characters. Pages escape the
rendered text like any other untrusted text; the email is plain text.

Each workspace may keep its own template (compensation.drafting.templates); DEFAULT is the desk's own.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

from core.money import format_money

# name -> what it holds, for the editor's help text and the docs
PLACEHOLDERS: dict[str, str] = {
    "customer": "the customer's name, as on their ticket (\"there\" when unknown)",
    "explanation": "what changed and what happens to the money, in one paragraph",
    "corrected_answer": "the corrected answer to the customer's request, quoted; empty when there is none",
    "refunded": "what was refunded before, e.g. $110.00",
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


def _money(cents, currency: str) -> str:
    return format_money(int(cents or 0), currency or "USD")


def explanation(facts: dict) -> str:
    """The paragraph that explains the reversal and the corrected answer together, by situation."""
    cur = facts.get("currency") or "USD"
    refunded, kept = _money(facts.get("refunded_cents"), cur), _money(facts.get("replacement_cents"), cur)
    back = _money(facts.get("reverse_cents"), cur)
    situation = facts.get("situation", "")
    earlier = "Our earlier message to you"
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


def corrected_answer(facts: dict) -> str:
    """The corrected answer an agent wrote (untrusted text, validated with the draft), introduced."""
    body = (facts.get("corrected_body") or "").strip()
    return f"Here is our corrected answer:\n\n{body}" if body else ""


def values(facts: dict, *, team: str = "") -> dict[str, str]:
    cur = facts.get("currency") or "USD"
    return {
        "customer": (facts.get("customer") or "").strip() or "there",
        "explanation": explanation(facts),
        "corrected_answer": corrected_answer(facts),
        "refunded": _money(facts.get("refunded_cents"), cur),
        "kept": _money(facts.get("replacement_cents"), cur),
        "back": _money(facts.get("reverse_cents"), cur),
        "team": team,
    }


def render(template: Template, facts: dict, *, team: str = "") -> tuple[str, str]:
    """(subject, body) of the customer's message: `template` filled from `facts` in one pass. Blank lines
    left by an empty placeholder (no corrected answer) are folded away."""
    filled = values(facts, team=team)
    subject = " ".join(string.Template(template.subject).substitute(filled).split())
    body = string.Template(template.body).substitute(filled)
    paragraphs = [p.strip("\n") for p in body.split("\n\n")]
    return subject, "\n\n".join(p for p in paragraphs if p.strip())
