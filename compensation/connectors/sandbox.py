"""The demo's connectors: the sandbox ledger (money), the outbox (email) and the manual record.
They deliver the way the item kind's registration always has (compensation.effect_kinds)."""
from __future__ import annotations

from compensation import effect_kinds
from compensation.connectors.base import Connector, Outcome, register
from compensation.models import CompensationItem

K = CompensationItem.Kind


class Registered(Connector):
    schema = {}  # no options: nothing leaves the deployment's own database

    def send(self, item, options: dict) -> Outcome:
        done = effect_kinds.item_kind(item.kind).deliver(item)
        reference = str(done.get("ledger_entry") or done.get("outbox") or ("manual" if done.get("manual") else ""))
        return Outcome("delivered", reference=reference)


class SandboxLedger(Registered):
    name, label, kinds = "sandbox_ledger", "sandbox ledger", frozenset(CompensationItem.MONEY_KINDS)


class Outbox(Registered):
    name, label, kinds = "outbox", "outbox", frozenset(CompensationItem.EMAIL_KINDS)


class Manual(Registered):
    name, label, kinds = "manual", "done by hand", frozenset({K.MANUAL_COMPENSATION})


for _connector in (SandboxLedger(), Outbox(), Manual()):
    register(_connector)
