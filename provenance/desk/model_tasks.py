"""The desk's model tasks: instruction and output schema for Gemini, and the deterministic offline
implementation used when no key is configured."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from provenance.llm import model_task

_SECTION_KEYS = {"refunds": "refund_policy", "vip customers": "vip_rules", "shipping": "shipping_policy"}


class FactOut(BaseModel):
    key: str
    value: str


class ExtractedFacts(BaseModel):
    facts: list[FactOut]


@model_task(
    "extract_policy", prompt_version="extract-policy-v1", schema=ExtractedFacts,
    instruction=(
        "You read a support policy page and copy each policy section faithfully into memory facts. "
        "Use the keys refund_policy, vip_rules or shipping_policy. Copy policy updates as written."
    ),
)
def extract_policy(input: dict, facts: dict) -> dict:
    found: dict[str, list[str]] = {}
    key = None
    for line in (input.get("content") or "").splitlines():
        heading = re.match(r"^##\s+(.*)$", line.strip())
        if heading:
            key = _SECTION_KEYS.get(heading.group(1).strip().lower())
            continue
        if line.startswith("#"):
            key = None
        elif key and line.strip():
            found.setdefault(key, []).append(line.strip())
    return {"facts": [{"key": k, "value": " ".join(v)} for k, v in found.items()]}


class TriageOut(BaseModel):
    choice: Literal["refund", "reply", "escalate"]
    level: Literal["full", "partial", "none"]


_CATEGORY_WORDS = [
    ("complaint", ("complaint", "lawyer", "unacceptable", "threat")),
    ("damaged", ("damaged", "broken", "cracked", "missing", "never arrived")),
    ("unopened", ("unopened",)),
    ("change_of_mind", ("changed my mind", "change of mind")),
]


def _category(text: str) -> str:
    text = text.lower()
    for category, words in _CATEGORY_WORDS:
        if any(w in text for w in words):
            return category
    return "question"


def _policy_rules(policy: str) -> dict[str, tuple[str, str]]:
    rules = {}
    for clause in re.split(r"(?<=\.)\s+", policy):
        if ":" not in clause:
            continue
        condition, outcome = clause.split(":", 1)
        outcome = outcome.lower()
        if "full refund" in outcome:
            decision = ("refund", "full")
        elif "partial refund" in outcome:
            decision = ("refund", "partial")
        elif "escalate" in outcome:
            decision = ("escalate", "none")
        else:
            decision = ("reply", "none")
        rules[_category(condition)] = decision
    return rules


@model_task(
    "triage", prompt_version="triage-v1", schema=TriageOut,
    instruction=(
        "You triage a support ticket under the policy facts given. Answer with choice refund, reply or "
        "escalate and a refund level full, partial or none."
    ),
)
def triage(input: dict, facts: dict) -> dict:
    policy = facts.get("refund_policy")
    if not policy:
        return {"choice": "escalate", "level": "none"}
    body = input.get("body", "")
    vip_rules = (facts.get("vip_rules") or "").lower()
    if "vip" in body.lower() and vip_rules:
        if "no checks" in vip_rules:
            return {"choice": "refund", "level": "full"}
        if "verified" in vip_rules and input.get("tier") == "vip":
            return {"choice": "refund", "level": "full"}
    choice, level = _policy_rules(policy).get(_category(body), ("reply", "none"))
    return {"choice": choice, "level": level}


class EmailOut(BaseModel):
    subject: str
    body: str


@model_task(
    "compose_email", prompt_version="compose-email-v1", schema=EmailOut,
    instruction="Write a short, polite customer email for the template and amount given. No links.",
)
def compose_email(input: dict, facts: dict) -> dict:
    name = input.get("customer", "there")
    amount = input.get("refund_cents", 0)
    if input["template"] == "refund_confirmation":
        return {"subject": f"Your refund for ticket {input['ticket']}",
                "body": f"Hello {name}, we have refunded {amount / 100:.2f} {input.get('currency', 'USD')} "
                        f"to your original payment method."}
    if input["template"] == "escalate":
        return {"subject": f"Your ticket {input['ticket']} was escalated",
                "body": f"Hello {name}, a supervisor is looking into your ticket and will reply personally."}
    return {"subject": f"About your ticket {input['ticket']}",
            "body": f"Hello {name}, thank you for writing. Our returns guide explains your options; "
                    f"this order does not qualify for a refund."}
