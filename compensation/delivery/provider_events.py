"""Signed webhooks from Stripe: a delivery's later states (a refund that fails an hour after it was
reported as succeeded, an invoice paid or voided).

An event counts only when its `Stripe-Signature` verifies against a configured signing secret (the
deployment's, or a workspace's own); it is applied once by its id (ProviderEvent), and only to a
delivery of the workspace whose secret signed it and whose object carries that workspace in its metadata.
Anything else changes nothing: a bad signature is answered 400 and counted, an unknown object or
another workspace's object is kept as a refused event."""
from __future__ import annotations

import logging

import stripe
from django.core.cache import cache
from django.db import IntegrityError, transaction

from compensation.delivery.connectors.stripe_payments import INVOICE_STATES, REFUND_STATES, WEBHOOK_SECRET_ENV
from compensation.delivery_models import Delivery, DeliveryState, ProviderEvent, WorkspaceConnector
from core.audit import trail
from core import secret_registry
from core.vocabulary import AuditAction, Via

log = logging.getLogger(__name__)
REFUSED_COUNTER = "webhooks:stripe:refused"
INVOICE_EVENTS = {"invoice.paid": "succeeded", "invoice.voided": "canceled", "invoice.marked_uncollectible": "failed",
                  "invoice.payment_failed": "pending", "invoice.finalized": "pending", "invoice.sent": "pending"}


class BadSignature(ValueError):
    pass


def _secret(name: str, *, workspace: str) -> str:
    try:
        return secret_registry.value(name, workspace=workspace)
    except secret_registry.SecretRefused:  # a name the registry no longer holds (for this workspace) signs nothing
        return ""


def _secrets() -> list[tuple[int | None, str]]:
    """(workspace id or None for the deployment, secret), every configured Stripe signing secret: the
    deployment's, and each workspace's own as its Stripe connector names it in the secret registry."""
    found = [(None, _secret(WEBHOOK_SECRET_ENV, workspace=""))]
    rows = (WorkspaceConnector.objects.filter(connector="stripe").exclude(options__webhook_secret_env=None)
            .select_related("workspace"))
    for row in rows:
        found.append((row.workspace_id, _secret(str(row.options.get("webhook_secret_env", "")),
                                                workspace=row.workspace.name)))
    return [(ws, s) for ws, s in found if s]


def _verify(payload: bytes, signature: str | None) -> tuple[int | None, dict]:
    for workspace_id, key in _secrets():
        try:
            event = stripe.Webhook.construct_event(payload, signature, key)
        except (stripe.SignatureVerificationError, ValueError):
            continue
        return workspace_id, event.to_dict() if hasattr(event, "to_dict") else dict(event)
    try:
        cache.incr(REFUSED_COUNTER)
    except ValueError:
        cache.set(REFUSED_COUNTER, 1, timeout=None)
    log.warning("stripe webhook refused: no configured signing secret verifies it")
    raise BadSignature("the Stripe-Signature header does not verify")


def _new_state(event_type: str, obj: dict) -> str | None:
    if event_type.startswith(("refund.", "charge.refund.")):
        return REFUND_STATES.get(obj.get("status", ""))
    if event_type.startswith("invoice."):
        return INVOICE_EVENTS.get(event_type) or INVOICE_STATES.get(obj.get("status", ""))
    return None


def stripe_event(*, payload: bytes, signature: str | None) -> str:
    """Apply one Stripe webhook event; returns what happened ("applied", "duplicate", "unknown object",
    "another workspace", "ignored"). Raises BadSignature."""
    signed_by, event = _verify(payload, signature)
    event_id, event_type = str(event.get("id", ""))[:128], str(event.get("type", ""))[:64]
    obj = (event.get("data") or {}).get("object") or {}
    reference = str(obj.get("id", ""))[:128]
    try:
        with transaction.atomic():
            record = ProviderEvent.objects.create(provider="stripe", event_id=event_id, type=event_type,
                                                  outcome="received")
            delivery = (Delivery.objects.select_related("item__incident").filter(connector="stripe", reference=reference)
                        .first() if reference else None)
            state = _new_state(event_type, obj)
            if delivery is None:
                outcome = "unknown object"
            elif (signed_by is not None and delivery.item.incident.workspace_id != signed_by) or \
                    str((obj.get("metadata") or {}).get("kintsugi_workspace", delivery.item.incident.workspace_id)) \
                    != str(delivery.item.incident.workspace_id):
                outcome, delivery = "another workspace", None
            elif state is None:
                outcome = "ignored"
            else:
                outcome = _apply(delivery, state, event_type, obj, event_id)
            record.delivery, record.outcome = delivery, outcome
            record.save(update_fields=["delivery", "outcome"])
            return outcome
    except IntegrityError:
        return "duplicate"


def _apply(delivery: Delivery, state: str, event_type: str, obj: dict, event_id: str) -> str:
    item = delivery.item
    trail.lock_chain(item.incident.workspace_id)
    delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
    if delivery.state == state:
        return "unchanged"
    was = delivery.state
    delivery.state = state
    delivery.failure_reason = str(obj.get("failure_reason") or "")[:300] if state == DeliveryState.FAILED else ""
    delivery.save(update_fields=["state", "failure_reason", "updated_at"])
    trail.record(action=AuditAction.ITEM_DELIVERY_CHANGED, subject_type="compensation_item", subject_id=item.pk,
                 via=Via.API, actor=None,
                 reason=f"Stripe {event_type}", incident_id=item.incident_id, from_status=was, to_status=state,
                 data={"event": event_id, "reference": delivery.reference, "failure_reason": delivery.failure_reason})
    return "applied"
