"""From a repair's effects to the items people review: netting per ticket.

Netting, per ticket of an incident:
- invalidated refunds A and replacement refunds B on the same ticket become ONE money item for the
  difference: a `refund_reversal` of A - B when A > B (a full refund that should have been partial), a
  `replacement_refund` of B - A when B > A, nothing when they cancel out. Without a replacement, each
  ticket's invalidated refunds become one `refund_reversal` of A.
- invalidated emails become ONE `correction_email` per ticket, and every replacement email of the ticket
  (the new confirmation of a netted refund, a re-run's rewritten message, a reply sent instead of a
  refund) is folded into it: one message per customer per incident explains the money and carries the
  corrected answer (compensation.drafting.customer_message), never a correction and a second message.
- replacement emails of tickets with nothing invalidated to correct stay `replacement_email` items;
  replacement refunds without anything invalidated stay `replacement_refund`.
- a customer with messages on several tickets still gets ONE message: compensation.drafting.grouping
  merges them after this per-ticket netting (money items stay per ticket).
- effects of any other kind (compensation.drafting.effect_kinds: kinds registered without netting, and kinds
  nobody registered, which fall back to a manual compensation) become one item each, carrying the effect.

The words of each planned item come from its kind's spec (compensation.drafting.kinds; the built-in kinds' words
in compensation.drafting.item_kinds), written by compensation.drafting.drafts.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from compensation.drafting.effect_kinds import EffectKind, effect_kind, item_for


@dataclass
class PlannedItem:
    kind: str
    ticket: str
    amount_cents: int
    currency: str
    effects: list[dict] = field(default_factory=list)  # RepairEffect-shaped dicts: effect_id, role, kind, ...
    situation: str = ""  # what the email has to explain
    netting: dict = field(default_factory=dict)
    # The per-ticket messages one customer's message stands for (compensation.drafting.grouping); empty otherwise.
    sections: list["PlannedItem"] = field(default_factory=list)

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
    says how each kind is compensated (compensation.drafting.effect_kinds.kinds_of, for the workspace)."""
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
