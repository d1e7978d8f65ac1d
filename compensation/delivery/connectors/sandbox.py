"""The demo's connectors: the sandbox ledger (money), the outbox (email) and the manual record. Each
delivers the kinds whose spec names it as their connector (compensation.drafting.kinds), safe to repeat through
the item's execution key:
- the sandbox ledger files a ledger row (a reversal request for a kind that compensates money that left,
  else a payment) with get_or_create on its unique idempotency key;
- the outbox sends an email through Django's email framework with the key in `X-Kintsugi-Idempotency`,
  which the outbox backend files at most once;
- the manual record sends nothing: a person did it, and the approval's reason says what."""
from __future__ import annotations

from django.core.mail import EmailMessage

from compensation.delivery.connectors.base import Connector, Outcome, register
from compensation.drafting.kinds import KindSet, spec
from provenance.models import LedgerEntry, OutboxEmail


class SandboxLedger(Connector):
    name, label, kinds = "sandbox_ledger", "sandbox ledger", KindSet(lambda k: k.connector == "sandbox_ledger")
    schema = {}  # no options: nothing leaves the deployment's own database

    def send(self, item, options: dict) -> Outcome:
        incident = item.incident
        invalidated = [e["effect_id"] for e in item.original if e["role"] == "invalidated"]
        entry, _ = LedgerEntry.objects.get_or_create(idempotency_key=item.execution_key, defaults=dict(
            workspace_id=incident.workspace_id, run_number=incident.run_number,
            kind=LedgerEntry.Kind.REVERSAL_REQUEST if spec(item.kind).compensates else LedgerEntry.Kind.PAYMENT,
            ticket_id=item.ticket_id, amount_cents=item.amount_cents, currency=item.currency,
            effect_id=(invalidated or [e["effect_id"] for e in item.original] or [None])[0],
            reference=item.payment_reference,
        ))
        return Outcome("delivered", reference=str(entry.pk))


class Outbox(Connector):
    name, label, kinds = "outbox", "outbox", KindSet(lambda k: k.connector == "outbox")
    schema = {}  # no options: the deployment's own email backend

    def send(self, item, options: dict) -> Outcome:
        key = item.execution_key
        if OutboxEmail.objects.filter(idempotency_key=key).exists():
            return Outcome("delivered", reference="already filed")
        incident = item.incident
        # The recipient is the ticket's customer (validated equal to the draft's `to` at approval).
        EmailMessage(
            subject=item.subject, body=item.body, to=[item.customer_email],
            headers={"X-Kintsugi-Workspace": incident.workspace.name, "X-Kintsugi-Run": str(incident.run_number),
                     "X-Kintsugi-Idempotency": key, "X-Kintsugi-Compensation": str(item.pk)},
        ).send()
        return Outcome("delivered", reference="sent")


class Manual(Connector):
    name, label, kinds = "manual", "done by hand", KindSet(lambda k: k.connector == "manual")
    schema = {}  # no options: nothing leaves through kintsugi

    def send(self, item, options: dict) -> Outcome:
        return Outcome("delivered", reference="manual")

    def executed(self, item) -> dict:
        # The approval's reason is the record of what a person did.
        return {"manual": True, "recorded": item.decision_reason}


for _connector in (SandboxLedger(), Outbox(), Manual()):
    register(_connector)
