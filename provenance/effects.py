"""What live effects do when they leave the system: a refund is a sandbox ledger payment, an email
goes out through Django's email framework (the outbox backend). Dispatched in batches by the
recorder's flush, inside the caller's transaction; idempotency keys make a repeat a no-op."""
from django.core.mail import EmailMessage, get_connection

from provenance.models import LedgerEntry, Workspace


def idempotency_key(workspace: str, run_number: int, effect_id: int) -> str:
    return f"{workspace}:{run_number}:effect:{effect_id}"


def dispatch_effects(*, workspace: str, run_number: int, effects: list[tuple[dict, dict]]) -> None:
    """`effects`: (effect row, details) pairs as the recorder queued them."""
    if not effects:
        return
    ws = Workspace.objects.get(name=workspace)
    payments, messages = [], []
    for row, details in effects:
        key = idempotency_key(workspace, run_number, row["id"])
        if row["kind"] == "refund":
            payments.append(LedgerEntry(
                workspace=ws, run_number=run_number, kind=LedgerEntry.Kind.PAYMENT, ticket_id=row["ticket"] or "",
                amount_cents=row["amount"], currency=row["currency"], effect_id=row["id"], idempotency_key=key,
                reference=details.get("reference", f"pay-{workspace}-{row['id']}"),
            ))
        elif row["kind"] == "email":
            messages.append(EmailMessage(
                subject=details.get("subject", ""), body=details.get("body", ""), to=[details.get("to", "")],
                headers={"X-Kintsugi-Workspace": workspace, "X-Kintsugi-Run": str(run_number),
                         "X-Kintsugi-Effect": str(row["id"]), "X-Kintsugi-Idempotency": key},
            ))
    LedgerEntry.objects.bulk_create(payments, ignore_conflicts=True)
    if messages:
        get_connection().send_messages(messages)
