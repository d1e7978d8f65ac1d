"""What live effects do when they leave the system: a refund is a sandbox ledger payment, an email
goes out through Django's email framework (the outbox backend). Dispatched in batches by the
recorder's flush, inside the caller's transaction; idempotency keys make a repeat a no-op.

Which function sends which kind is this module's table, DISPATCHERS: refunds and emails here, a team's own
kind added by registering it (compensation.drafting.effect_kinds.register hands its `dispatch` down); a kind
without a dispatcher is recorded in the graph only: the agent that recorded it performs it itself."""
import logging
from collections import defaultdict
from typing import Callable

from django.core.mail import EmailMessage, get_connection

from provenance.models import LedgerEntry, Workspace

log = logging.getLogger(__name__)


def idempotency_key(workspace: str, run_number: int, effect_id: int) -> str:
    return f"{workspace}:{run_number}:effect:{effect_id}"


def pay_refunds(ws: Workspace, run_number: int, batch: list[tuple[dict, dict, str]]) -> None:
    LedgerEntry.objects.bulk_create([LedgerEntry(
        workspace=ws, run_number=run_number, kind=LedgerEntry.Kind.PAYMENT, ticket_id=row["ticket"] or "",
        amount_cents=row["amount"], currency=row["currency"], effect_id=row["id"], idempotency_key=key,
        reference=details.get("reference", f"pay-{ws.name}-{row['id']}"),
    ) for row, details, key in batch], ignore_conflicts=True)


def send_emails(ws: Workspace, run_number: int, batch: list[tuple[dict, dict, str]]) -> None:
    get_connection().send_messages([EmailMessage(
        subject=details.get("subject", ""), body=details.get("body", ""), to=[details.get("to", "")],
        headers={"X-Kintsugi-Workspace": ws.name, "X-Kintsugi-Run": str(run_number),
                 "X-Kintsugi-Effect": str(row["id"]), "X-Kintsugi-Idempotency": key},
    ) for row, details, key in batch])


Dispatcher = Callable[[Workspace, int, list[tuple[dict, dict, str]]], None]
DISPATCHERS: dict[str, Dispatcher] = {"refund": pay_refunds, "email": send_emails}


def set_dispatcher(kind: str, dispatch: Dispatcher | None) -> None:
    """How live effects of `kind` leave the system from now on; None: the agent performs them itself."""
    if dispatch is None:
        DISPATCHERS.pop(kind, None)
    else:
        DISPATCHERS[kind] = dispatch


def dispatch_effects(*, workspace: str, run_number: int, effects: list[tuple[dict, dict]]) -> None:
    """`effects`: (effect row, details) pairs as the recorder queued them."""
    if not effects:
        return
    ws = None  # read once a kind has a dispatcher: effects the agents perform themselves need no row
    by_kind: dict[str, list] = defaultdict(list)
    for row, details in effects:
        by_kind[row["kind"]].append((row, details, idempotency_key(workspace, run_number, row["id"])))
    # Money before messages: a confirmation never precedes its payment in the same flush.
    for kind in sorted(by_kind, key=lambda k: (k != "refund", k != "email", k)):
        dispatch = DISPATCHERS.get(kind)
        if dispatch is None:
            log.debug("%d %s effects recorded; no dispatcher: the agent performs them", len(by_kind[kind]), kind)
            continue
        ws = ws or Workspace.objects.get(name=workspace)
        dispatch(ws, run_number, by_kind[kind])
