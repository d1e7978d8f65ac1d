"""What a live effect does when it leaves the system: a refund is a sandbox ledger payment, an email
goes out through Django's email framework (the outbox backend)."""
from django.core.mail import EmailMessage

from provenance.models import LedgerEntry, Workspace


def dispatch_effect(*, workspace: str, run_number: int, effect: dict, details: dict) -> None:
    key = f"{workspace}:{run_number}:effect:{effect['id']}"
    if effect["kind"] == "refund":
        ws = Workspace.objects.get(name=workspace)
        LedgerEntry.objects.get_or_create(idempotency_key=key, defaults=dict(
            workspace=ws, run_number=run_number, kind=LedgerEntry.Kind.PAYMENT, ticket_id=effect["ticket"] or "",
            amount_cents=effect["amount"], currency=effect["currency"], effect_id=effect["id"],
            reference=details.get("reference", f"pay-{workspace}-{effect['id']}"),
        ))
    elif effect["kind"] == "email":
        EmailMessage(
            subject=details.get("subject", ""), body=details.get("body", ""), to=[details.get("to", "")],
            headers={
                "X-Kintsugi-Workspace": workspace, "X-Kintsugi-Run": str(run_number),
                "X-Kintsugi-Effect": str(effect["id"]), "X-Kintsugi-Idempotency": key,
            },
        ).send()
