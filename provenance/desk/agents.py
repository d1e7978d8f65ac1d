"""The built-in support desk: research → triage → refund → notifier, sharing one memory."""
from __future__ import annotations

import re

from provenance.agents import agent
from provenance.desk import model_tasks  # noqa: F401  (registers the desk's model tasks)


@agent("research")
def research(rec, payload: dict) -> dict:
    """Read a policy page and copy its sections into memory facts."""
    content = rec.ingest(payload["source"])
    if content is None:
        return {"source": payload["source"], "keys": []}
    answer = rec.ask("extract_policy", {"source": payload["source"], "content": content})
    keys = []
    for fact in answer["facts"]:
        rec.set(fact["key"], fact["value"], observed_at=payload.get("observed_at"))
        keys.append(fact["key"])
    return {"source": payload["source"], "keys": sorted(keys)}


@agent("triage")
def triage(rec, payload: dict) -> dict:
    """Decide refund / reply / escalate with a refund level; hand the work on."""
    rec.get("refund_policy")
    if "vip" in payload.get("body", "").lower():
        rec.get("vip_rules")
    decision = rec.ask("triage", {k: payload[k] for k in ("ticket", "body", "tier", "amount_cents")})
    if decision["choice"] == "refund":
        rec.handoff("refund", {**payload, "level": decision["level"]})
    else:
        rec.handoff("notifier", {**payload, "template": decision["choice"], "refund_cents": 0})
    return {"choice": decision["choice"], "level": decision["level"]}


@agent("refund")
def refund(rec, payload: dict) -> dict:
    """Pay the refund into the sandbox ledger and hand the confirmation to the notifier."""
    policy = rec.get("refund_policy") or ""
    percent = 100
    if payload["level"] == "partial":
        match = re.search(r"partial refund of (\d+)%", policy)
        percent = int(match.group(1)) if match else 50
    amount = payload["amount_cents"] * percent // 100
    rec.effect("refund", amount=amount, ticket=payload["ticket"], currency=payload.get("currency", "USD"),
               customer=payload.get("email"), reference=f"pay-{payload['ticket']}-{payload.get('payment_reference', '')}")
    rec.handoff("notifier", {**payload, "template": "refund_confirmation", "refund_cents": amount})
    return {"amount": amount, "level": payload["level"]}


@agent("notifier")
def notifier(rec, payload: dict) -> dict:
    """Email the customer through the outbox."""
    keys = ("ticket", "customer", "template", "refund_cents", "currency")
    email = rec.ask("compose_email", {k: payload.get(k) for k in keys})
    rec.effect("email", amount=payload.get("refund_cents", 0), ticket=payload["ticket"],
               currency=payload.get("currency", "USD"), to=payload.get("email", ""),
               subject=email["subject"], body=email["body"])
    return {"template": payload["template"], "amount": payload.get("refund_cents", 0)}
