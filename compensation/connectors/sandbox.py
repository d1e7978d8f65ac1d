"""The demo's connectors: the sandbox ledger (money), the outbox (email) and the manual record.
Each delivers the kinds whose spec names it as their connector, through the spec's deliver function
(compensation.kinds)."""
from __future__ import annotations

from compensation.connectors.base import Connector, Outcome, register
from compensation.kinds import KindSet, spec


class Registered(Connector):
    schema = {}  # no options: nothing leaves the deployment's own database

    def send(self, item, options: dict) -> Outcome:
        done = spec(item.kind).deliver(item)
        reference = str(done.get("ledger_entry") or done.get("outbox") or ("manual" if done.get("manual") else ""))
        return Outcome("delivered", reference=reference)


class SandboxLedger(Registered):
    name, label, kinds = "sandbox_ledger", "sandbox ledger", KindSet(lambda k: k.connector == "sandbox_ledger")


class Outbox(Registered):
    name, label, kinds = "outbox", "outbox", KindSet(lambda k: k.connector == "outbox")


class Manual(Registered):
    name, label, kinds = "manual", "done by hand", KindSet(lambda k: k.connector == "manual")


for _connector in (SandboxLedger(), Outbox(), Manual()):
    register(_connector)
