"""From a repair's effects to the items people review: netting per ticket, and the drafting tasks.

Netting, per ticket of an incident:
- invalidated refunds A and replacement refunds B on the same ticket become ONE money item for the
  difference: a `refund_reversal` of A - B when A > B (a full refund that should have been partial), a
  `replacement_refund` of B - A when B > A, nothing when they cancel out. Without a replacement, each
  ticket's invalidated refunds become one `refund_reversal` of A.
- invalidated emails become ONE `correction_email` per ticket, and every replacement email of the ticket
  (the new confirmation of a netted refund, a re-run's rewritten message, a reply sent instead of a
  refund) is folded into it: one message per customer per incident explains the money and carries the
  corrected answer (compensation.customer_message), never a correction and a second message.
- replacement emails of tickets with nothing invalidated to correct stay `replacement_email` items;
  replacement refunds without anything invalidated stay `replacement_refund`.
- effects of any other kind (compensation.effect_kinds: kinds registered without netting, and kinds
  nobody registered, which fall back to a manual compensation) become one item each, carrying the effect.

Drafting goes through the model client (provenance.llm): Gemini with a structured output schema when a
key is set, the deterministic offline drafters below otherwise. Everything a drafter returns is untrusted
and checked by compensation.validation before an item can be approved.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel

from compensation.customer_message import DEFAULT, render
from compensation.effect_kinds import EffectKind, effect_kind, item_for
from core.money import format_money
from provenance.llm import ModelTask

REVERSAL_TASK = "draft_refund_reversal"
EMAIL_TASK = "draft_correction_email"


@dataclass
class PlannedItem:
    kind: str
    ticket: str
    amount_cents: int
    currency: str
    effects: list[dict] = field(default_factory=list)  # RepairEffect-shaped dicts: effect_id, role, kind, ...
    situation: str = ""  # what the email has to explain
    netting: dict = field(default_factory=dict)

    @property
    def compensates(self) -> bool:
        return any(e["role"] == "invalidated" for e in self.effects)

    @property
    def draft_suffix(self) -> str:
        return ",".join(f"{e['role'][0]}{e['effect_id']}" for e in sorted(self.effects, key=lambda e: (e["role"], e["effect_id"])))


def _money_items(ticket: str, inv: list[dict], rep: list[dict], currency: str) -> tuple[list[PlannedItem], dict, str]:
    """The money items of one money kind on one ticket, with the ticket's netting and situation.

    Several payments on one ticket (the customer wrote again and was refunded again) are reversed
    against what was paid in total, one reversal per payment: the replacement nets against the
    earliest payments first, and no reversal asks back more than its own payment, so none is above
    what the customer paid for the ticket when each payment was not."""
    paid_back = sum(e["amount_cents"] for e in inv)
    should_be = sum(e["amount_cents"] for e in rep)
    netting = {"refunded_cents": paid_back, "replacement_cents": should_be, "netted": bool(inv and rep)}
    if not inv:
        return ([PlannedItem("replacement_refund", ticket, e["amount_cents"], e["currency"], [e], "new_refund", netting)
                 for e in rep], netting, "")
    diff = paid_back - should_be
    netting["reverse_cents"] = max(diff, 0)
    if diff < 0:
        return ([PlannedItem("replacement_refund", ticket, -diff, currency, inv + rep, "refund_increased", netting)],
                netting, "refund_increased")
    if diff == 0:
        return [], netting, "refund_unchanged"
    situation = "refund_reduced" if rep else "refund_withdrawn"
    if len(inv) == 1:
        return [PlannedItem("refund_reversal", ticket, diff, currency, inv + rep, situation, netting)], netting, situation
    items, kept_left = [], should_be
    for e in sorted(inv, key=lambda e: e["effect_id"]):
        kept = min(e["amount_cents"], kept_left)
        kept_left -= kept
        back = e["amount_cents"] - kept
        if back > 0:
            own = {"refunded_cents": e["amount_cents"], "replacement_cents": kept, "reverse_cents": back,
                   "netted": kept > 0, "payments": len(inv), "ticket_refunded_cents": paid_back,
                   "ticket_reverse_cents": diff}
            items.append(PlannedItem("refund_reversal", ticket, back, currency, [e] + (rep if not items else []),
                                     "refund_reduced" if kept else "refund_withdrawn", own))
    return items, netting, situation


def plan_items(effects: list[dict], kinds: Callable[[str], EffectKind] = effect_kind) -> list[PlannedItem]:
    """Group invalidated and replacement effects by ticket and net them (see the module docstring).
    `effects` are dicts with role, kind, ticket, amount_cents, currency, effect_id, details; `kinds`
    says how each kind is compensated (compensation.effect_kinds.kinds_of, for the workspace)."""
    by_ticket: dict[str, dict[tuple[str, str], list[dict]]] = defaultdict(lambda: defaultdict(list))
    one_each: list[dict] = []
    for e in effects:
        if e["role"] in ("invalidated", "replacement"):
            nets = kinds(e["kind"]).nets
            if nets == "money":
                by_ticket[e["ticket"]][(e["role"], e["kind"])].append(e)
            elif nets == "message":
                by_ticket[e["ticket"]][(e["role"], "message")].append(e)
            else:
                one_each.append(e)
    items: list[PlannedItem] = []
    for ticket in sorted(by_ticket):
        g = by_ticket[ticket]
        inv_emails, rep_emails = g[("invalidated", "message")], g[("replacement", "message")]
        # Refunds first: the ticket's correction email explains its refund when it has one.
        money_kinds = sorted({k for role, k in g if k != "message"}, key=lambda k: (k != "refund", k))
        netting, situation = {}, ""
        for kind in money_kinds:
            inv, rep = g[("invalidated", kind)], g[("replacement", kind)]
            currency = next((e["currency"] for e in inv + rep + inv_emails + rep_emails), "USD")
            made, kind_netting, kind_situation = _money_items(ticket, inv, rep, currency)
            items.extend(made)
            if not netting or (not situation and kind_situation):
                netting, situation = kind_netting, kind_situation
        currency = next((e["currency"] for k in money_kinds for e in g[("invalidated", k)] + g[("replacement", k)]),
                        next((e["currency"] for e in inv_emails + rep_emails), "USD"))
        if inv_emails:
            # A replacement email of the very action whose email it replaces (its re-run wrote the message
            # again, differently) is the corrected message: one email explains and carries it, never a
            # correction and a second message.
            # So is the one new message of a ticket whose old message was superseded with nothing else to
            # explain (the reply came from a new handoff child): one correction carrying the new words.
            # And so is every other new message of the ticket (a reply instead of the refund it withdrew):
            # the customer gets ONE message per incident, explaining the money and carrying the new answer.
            folded = rep_emails
            items.append(PlannedItem("correction_email", ticket, 0, currency, inv_emails + folded,
                                     situation or ("message_corrected" if folded else "message_withdrawn"), netting))
        else:
            folded = []
        items.extend(PlannedItem("replacement_email", ticket, 0, e["currency"], [e], "replacement", netting)
                     for e in rep_emails if e not in folded)
    # Never silence: whatever kintsugi cannot net or send itself still reaches a person, with the effect
    # and its amount (money of a kind nobody declared is still money, never $0.00).
    items.extend(PlannedItem(item_for(e, kinds), e["ticket"] or "", e["amount_cents"] or 0, e["currency"], [e],
                             f"{e['role']}_{e['kind']}", {})
                 for e in sorted(one_each, key=lambda e: (e["ticket"] or "", e["effect_id"])))
    return items


# --- the drafting tasks ---

class ReversalDraft(BaseModel):
    customer_email: str
    payment_reference: str
    amount_cents: int
    currency: str
    note: str


class EmailDraft(BaseModel):
    to: str
    subject: str
    body: str


def _money(cents: int, currency: str) -> str:
    return format_money(int(cents), currency)


def draft_refund_reversal(input: dict, facts: dict) -> dict:
    money = _money(input["reverse_cents"], input["currency"])
    if input["situation"] == "refund_reduced":
        note = (f"Ticket {input['ticket']} was refunded {_money(input['refunded_cents'], input['currency'])} "
                f"under a policy that was not ours; the correct refund is "
                f"{_money(input['replacement_cents'], input['currency'])}, so {money} is requested back.")
    else:
        note = (f"Ticket {input['ticket']} was refunded {money} under a policy that was not ours; it does not "
                f"qualify for a refund, so {money} is requested back.")
    return {"customer_email": input["customer_email"], "payment_reference": input["payment_reference"],
            "amount_cents": input["reverse_cents"], "currency": input["currency"], "note": note}


def draft_correction_email(input: dict, facts: dict) -> dict:
    """The offline drafter: the desk's own template (compensation.customer_message.DEFAULT) filled in."""
    subject, body = render(DEFAULT, input)
    return {"to": input["customer_email"], "subject": subject, "body": body}


def reversal_input(*, item_facts: dict) -> dict:
    """The model input for a reversal: only what the draft may use (no ids, so equal cases share a cache entry)."""
    keys = ("ticket", "customer", "customer_email", "payment_reference", "currency", "paid_cents",
            "refunded_cents", "replacement_cents", "reverse_cents", "situation")
    return {k: item_facts.get(k) for k in keys}


def email_input(*, item_facts: dict) -> dict:
    keys = ("ticket", "customer", "customer_email", "currency", "paid_cents", "refunded_cents",
            "replacement_cents", "reverse_cents", "situation", "original_subject", "original_body")
    if item_facts.get("corrected_body"):  # the corrected answer the email carries
        keys += ("corrected_subject", "corrected_body")
    return {k: item_facts.get(k) for k in keys}


# The drafting's model tasks belong to compensation: drafts.py hands them to the model client itself
# (provenance.llm registers by name only the desk's own tasks).
MODEL_TASKS: dict[str, ModelTask] = {
    REVERSAL_TASK: ModelTask(
        REVERSAL_TASK, prompt_version="draft-refund-reversal-v1", schema=ReversalDraft, offline=draft_refund_reversal,
        instruction=(
            "You prepare a refund reversal request for a payments team. Use exactly the customer email, payment "
            "reference, amount in cents and currency given in the input; never a different amount, currency or "
            "recipient. Write a one-sentence plain-text note saying why the refund is reversed. No links, no "
            "markup, no other email addresses."
        )),
    EMAIL_TASK: ModelTask(
        EMAIL_TASK, prompt_version="draft-correction-email-v2", schema=EmailDraft, offline=draft_correction_email,
        instruction=(
            "You write ONE short, polite plain-text email to a customer correcting an earlier message that was "
            "based on a wrong policy. Address it to the customer email given and to nobody else. Explain the "
            "situation given and, when a corrected body is given, include it as the corrected answer. A human "
            "subject line without ticket numbers or other internal ids. Mention only the amounts and the currency "
            "in the input, written as the customer reads money (e.g. $55.00). No links, no markup, no other email "
            "addresses, no phone numbers."
        )),
}
