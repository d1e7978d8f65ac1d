"""The built-in review item kinds, one spec each (compensation.drafting.kinds.ItemKind): what the reviewer decides,
the words its draft starts from, its checks, its order in a case and the connector it leaves through.

Words, per kind:
- refund_reversal and correction_email: the model writes them (its task, the input it may use, and how its
  answer becomes the draft's fields), Gemini with a structured output schema when a key is set, the
  deterministic offline drafters below otherwise;
- replacement_refund: kintsugi, from the repair's numbers (no model text);
- replacement_email: the repair's re-run composed it through the model client (compose_email): carried over;
- manual_compensation: kintsugi's note saying what a person has to do about the effect it carries.
Everything drafted is untrusted and checked by compensation.drafting.validation before an item can be approved.
A team's own kind brings its words in its own spec (tests/compensation/test_registered_item_kind.py).
"""
from __future__ import annotations

from pydantic import BaseModel

from compensation.drafting.customer_message import DEFAULT, render
from compensation.drafting import validation
from compensation.drafting.kinds import ItemKind, ModelWords, Written, register_item_kind
from core.money import format_money
from core.vocabulary import ItemKind as K
from provenance.llm import ModelTask, backend_label, registered_task

REVERSAL_TASK = "draft_refund_reversal"
EMAIL_TASK = "draft_correction_email"


# --- the words the model writes -----------------------------------------------------------------------
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
    return f"{cents / 100:.2f} {currency}"


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
    """The offline drafter: the desk's own template (compensation.drafting.customer_message.DEFAULT) filled in."""
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
    if item_facts.get("locale") not in (None, "", "en_US"):  # money written the customer's way (1.234,50 €)
        keys += ("locale",)
    return {k: item_facts.get(k) for k in keys}


# The model tasks of the kinds the model words: compensation.drafting.drafts hands them to the model client itself
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
        EMAIL_TASK, prompt_version="draft-correction-email-v3", schema=EmailDraft, offline=draft_correction_email,
        instruction=(
            "You write ONE short, polite plain-text email to a customer correcting an earlier message that was "
            "based on a wrong policy. Address it to the customer email given and to nobody else. Explain the "
            "situation given and, when a corrected body is given, include it as the corrected answer. A human "
            "subject line without ticket numbers or other internal ids. Mention only the amounts and the currency "
            "in the input, written as the customer reads money (e.g. $55.00; in the locale given, when one is: "
            "1.234,50 € for de_DE). No links, no markup, no other email "
            "addresses, no phone numbers."
        )),
}


# --- the words kintsugi writes itself ---------------------------------------------------------------------
def manual_note(effect: dict, registration) -> str:
    """What a manual compensation asks a person to do, from the effect it carries and its effect kind's
    registration (compensation.drafting.effect_kinds.EffectKind), in plain text."""
    amount = (f" of {format_money(effect['amount_cents'], effect['currency'])}"
              if effect.get("amount_cents") else "")
    where = f" on ticket {effect['ticket']}" if effect.get("ticket") else ""
    target = (effect.get("details") or {}).get(registration.target) if registration.target else None
    where += f" to {target}" if isinstance(target, str) and target else ""
    known = " (a kind nobody declared: its amount is as recorded)" if registration.undeclared else ""
    if effect["role"] == "invalidated":
        return (f"The repair invalidated a {effect['kind']}{amount}{where} (effect #{effect['effect_id']}, action "
                f"#{effect['action_id']}) that already left{known}. kintsugi cannot undo it: compensate it by hand, "
                f"then approve saying what you did, or reject saying why it stands.")
    return (f"The repair produced a {effect['kind']}{amount}{where} (effect #{effect['effect_id']}, action "
            f"#{effect['action_id']}){known}; it was held, never performed. Perform it by hand, then approve saying "
            f"what you did, or reject it.")


def _manual_words(planned, facts: dict, kinds) -> Written:
    # No model text, and the item carries the amount (nothing of it leaves through kintsugi).
    effect = planned.effects[0]
    return Written({"to": facts["customer_email"], "subject": "", "body": manual_note(effect, kinds(effect["kind"])),
                    "amount_cents": planned.amount_cents, "currency": planned.currency, "payment_reference": ""},
                   "kintsugi (manual)")


def _replacement_refund_words(planned, facts: dict, kinds) -> Written:
    # Held by the repair (a re-run or a new action paid it); no model text, the numbers are the repair's.
    action = planned.effects[-1]["action_id"]
    note = (f"Refund the repair produced for ticket {planned.ticket} (action #{action}); held until approved."
            if planned.situation == "new_refund" else
            f"Difference between the corrected refund and the refund already paid on ticket {planned.ticket}.")
    return Written({"to": facts["customer_email"], "subject": "", "body": note, "amount_cents": planned.amount_cents,
                    "currency": planned.currency, "payment_reference": facts["payment_reference"]},
                   "repair re-run (no model text)")


def _replacement_email_words(planned, facts: dict, kinds) -> Written:
    # The re-run's notifier composed it through the model client; still untrusted.
    details = planned.effects[0]["details"]
    return Written({"to": details.get("to", ""), "subject": details.get("subject", ""), "body": details.get("body", ""),
                    "amount_cents": 0, "currency": planned.currency, "payment_reference": ""},
                   f"{backend_label()} (compose_email, repair re-run)", registered_task("compose_email").prompt_version)


def _reversal_fields(answer: dict, facts: dict) -> dict:
    return {"to": answer["customer_email"], "subject": "", "body": answer["note"], "amount_cents": answer["amount_cents"],
            "currency": answer["currency"], "payment_reference": answer["payment_reference"]}


def _email_fields(answer: dict, facts: dict) -> dict:
    return {"to": answer["to"], "subject": answer["subject"], "body": answer["body"], "amount_cents": 0,
            "currency": facts["currency"], "payment_reference": ""}


# --- the specs ----------------------------------------------------------------------------------------------
MONEY_DECIDES = "whether the money goes back (you may lower the amount, never raise it)"
EMAIL_DECIDES = "whether this email goes to the customer as written (you may edit it first)"
MONEY_EDITS, EMAIL_EDITS = ("amount_cents", "body"), ("to", "subject", "body")

register_item_kind(ItemKind(
    K.REFUND_REVERSAL, MONEY_DECIDES, validation.money_draft_problems, order=0, connector="sandbox_ledger",
    editable=MONEY_EDITS, moves_money=True, compensates=True,
    model_words=ModelWords(MODEL_TASKS[REVERSAL_TASK], lambda facts: reversal_input(item_facts=facts), _reversal_fields)))
register_item_kind(ItemKind(
    K.REPLACEMENT_REFUND, "whether the refund the repair produced is paid", validation.money_draft_problems, order=1,
    connector="sandbox_ledger", editable=MONEY_EDITS, moves_money=True, words=_replacement_refund_words))
register_item_kind(ItemKind(
    K.CORRECTION_EMAIL, EMAIL_DECIDES, validation.email_draft_problems, order=2, connector="outbox",
    editable=EMAIL_EDITS, message=True, compensates=True,
    model_words=ModelWords(MODEL_TASKS[EMAIL_TASK], lambda facts: email_input(item_facts=facts), _email_fields)))
register_item_kind(ItemKind(
    K.REPLACEMENT_EMAIL, EMAIL_DECIDES, validation.email_draft_problems, order=3, connector="outbox",
    editable=EMAIL_EDITS, message=True, words=_replacement_email_words))
register_item_kind(ItemKind(
    K.MANUAL_COMPENSATION, "that a person compensated it by hand: approve saying what was done, or reject",
    validation.manual_draft_problems, order=4, connector="manual", compensates=True, needs_ticket=False,
    reason_required=True, words=_manual_words))
