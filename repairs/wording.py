"""How the repair reads to people: repair-status labels, the incident's badge, decisions as short text.

One place for these words, so the incident page, the dashboard, the picture and the reports say the same.
"""
from __future__ import annotations

import json

from core.money import format_money
from core.vocabulary import IncidentStatus
from repairs.models import Incident

STATUS_LABELS = {
    "poisoned": "Poisoned",
    "rerun_changed": "Re-run, output changed",
    "rerun_same": "Re-run, same output (cascade stopped)",
    "skipped": "Skipped",
    "superseded": "Superseded",
    "new": "New",
}
# While an incident is repairing, its phase says more than the status: the worker walks the radius,
# applies the plan, then verifies against the clean baseline (and drafts the items) before "Repaired".
PHASE_LABELS = {"walking": "Repairing", "applying": "Applying the repair", "verifying": "Verifying"}


def status_label(incident: Incident) -> str:
    """The incident's badge text: its phase while a worker repairs it, else its status."""
    if incident.status == IncidentStatus.REPAIRING:
        return PHASE_LABELS.get(incident.phase, "Repairing")
    return incident.get_status_display()


def _is_money_key(key: str) -> bool:
    return key == "amount" or key.endswith("_cents")


def describe(decision, *, currency: str | None = None) -> str:
    """A decision as short text: `choice: refund, level: full`. Values stay untrusted text.

    Money keys (`amount`, `…_cents`: integer cents in the desk's agents' decisions) read as money in
    `currency` ("amount: $100.00"); decisions carry no currency, so without one they read as a plain
    decimal ("amount: 100.00"), never as cents."""
    if decision is None:
        return "—"
    if not isinstance(decision, dict):
        return json.dumps(decision, sort_keys=True)
    parts = []
    for key, value in sorted(decision.items()):
        if _is_money_key(key) and isinstance(value, int) and not isinstance(value, bool):
            label = key.removesuffix("_cents")
            parts.append(f"{label}: {format_money(value, currency) if currency else f'{value / 100:,.2f}'}")
        else:
            parts.append(f"{key}: {value if isinstance(value, (str, int)) else json.dumps(value, sort_keys=True)}")
    return ", ".join(parts)


# --- decisions in a support lead's words ----------------------------------------------------------------
_CHOICES = {"reply": "a reply, no refund", "escalate": "an escalation to a supervisor, no refund yet"}
_TEMPLATES = {"reply": "an email saying the order does not qualify for a refund",
              "escalate": "an email saying a supervisor is looking into it"}


def _money(cents, currency: str | None) -> str:
    if isinstance(cents, bool) or not isinstance(cents, int):
        return str(cents)
    return format_money(cents, currency) if currency else f"{cents / 100:,.2f}"


def human_decision(agent: str, decision, *, currency: str | None = None) -> str:
    """One agent's decision as a support lead says it: "a full refund", "$75.00 paid back", "an email
    confirming the $75.00 refund". Decisions of other shapes read through `describe`; None reads "" (the
    action did not decide anything on that side of the repair)."""
    if decision is None:
        return ""
    if not isinstance(decision, dict):
        return describe(decision, currency=currency)
    keys = set(decision)
    if keys == {"choice", "level"}:
        choice, level = decision["choice"], decision["level"]
        if choice == "refund":
            return f"a {level} refund" if isinstance(level, str) and level not in ("", "none") else "a refund"
        return _CHOICES.get(choice, f"{choice}")
    if keys == {"amount", "level"}:
        return f"{_money(decision['amount'], currency)} refunded"
    if keys == {"template", "amount"}:
        template = decision["template"]
        if template == "refund_confirmation":
            return f"an email confirming the {_money(decision['amount'], currency)} refund"
        return _TEMPLATES.get(template, f"a {str(template).replace('_', ' ')} email")
    return describe(decision, currency=currency)
