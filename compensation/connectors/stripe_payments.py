"""Money through Stripe (the `stripe` package).

- A held replacement refund becomes a Refund of the ticket's original payment (a PaymentIntent `pi_...`,
  otherwise a Charge).
- A refund reversal asks the customer for money back the way Stripe offers it: an Invoice, sent to the
  customer for them to pay (collection_method=send_invoice), after a Customer and an InvoiceItem.
Every request carries an Idempotency-Key derived from the item's execution key (one per step), so a
resume after a crash, a timeout or a 500 repeats the request and Stripe returns the first answer: one
refund or invoice per item, whatever happens in between. The object's later states come from signed
webhooks (compensation.provider_events)."""
from __future__ import annotations

import stripe
from django.conf import settings

from compensation.connectors.base import Connector, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.connectors.config import secret
from compensation.models import CompensationItem

K = CompensationItem.Kind
REFUND_STATES = {"pending": "pending", "requires_action": "pending", "succeeded": "succeeded",
                 "failed": "failed", "canceled": "canceled"}
INVOICE_STATES = {"draft": "submitted", "open": "pending", "paid": "succeeded", "void": "canceled",
                  "uncollectible": "failed"}
API_KEY_ENV = "KINTSUGI_STRIPE_API_KEY"
WEBHOOK_SECRET_ENV = "KINTSUGI_STRIPE_WEBHOOK_SECRET"


def client(options: dict) -> stripe.StripeClient:
    base = settings.KINTSUGI_STRIPE_API_BASE
    return stripe.StripeClient(
        secret(options.get("api_key_env", API_KEY_ENV)), max_network_retries=0,
        base_addresses={"api": base} if base else None,
        http_client=stripe.RequestsClient(timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS))


def _metadata(item) -> dict:
    return {"kintsugi_workspace": str(item.incident.workspace_id), "kintsugi_item": str(item.pk),
            "kintsugi_ticket": item.ticket_id}


def _refund(c: stripe.StripeClient, item) -> Outcome:
    ref = item.payment_reference
    params = {"amount": item.amount_cents, "metadata": _metadata(item),
              ("payment_intent" if ref.startswith("pi_") else "charge"): ref}
    refund = c.v1.refunds.create(params=params, options={"idempotency_key": f"{item.execution_key}:refund"})
    return Outcome(REFUND_STATES.get(refund.status, "submitted"), reference=refund.id, status_code=200)


def _invoice(c: stripe.StripeClient, item) -> Outcome:
    key = item.execution_key
    meta = _metadata(item)
    customer = c.v1.customers.create(params={"email": item.customer_email, "metadata": meta},
                                     options={"idempotency_key": f"{key}:customer"})
    c.v1.invoice_items.create(params={"customer": customer.id, "amount": item.amount_cents,
                                      "currency": item.currency.lower(), "metadata": meta,
                                      "description": f"Refund paid in error on ticket {item.ticket_id}"},
                              options={"idempotency_key": f"{key}:invoice_item"})
    invoice = c.v1.invoices.create(params={"customer": customer.id, "collection_method": "send_invoice",
                                           "days_until_due": 14, "pending_invoice_items_behavior": "include",
                                           "metadata": meta}, options={"idempotency_key": f"{key}:invoice"})
    invoice = c.v1.invoices.finalize_invoice(invoice.id, options={"idempotency_key": f"{key}:finalize"})
    invoice = c.v1.invoices.send_invoice(invoice.id, options={"idempotency_key": f"{key}:send"})
    return Outcome(INVOICE_STATES.get(invoice.status, "submitted"), reference=invoice.id, status_code=200)


class Stripe(Connector):
    name, label = "stripe", "Stripe"
    kinds = frozenset(CompensationItem.MONEY_KINDS)
    resumes_safely = True
    secret_options = {"api_key_env": API_KEY_ENV}

    def configured(self, options: dict) -> bool:
        return bool(secret(options.get("api_key_env", API_KEY_ENV)))

    def send(self, item, options: dict) -> Outcome:
        c = client(options)
        try:
            return _refund(c, item) if item.kind == K.REPLACEMENT_REFUND else _invoice(c, item)
        except (stripe.APIConnectionError, stripe.RateLimitError) as e:
            raise TemporaryFailure("Stripe unreachable", status_code=getattr(e, "http_status", None)) from None
        except stripe.StripeError as e:
            status = getattr(e, "http_status", None)
            if status is None or status >= 500 or status == 409:
                raise TemporaryFailure(f"Stripe answered {status or 'nothing'}", status_code=status) from None
            code = getattr(e, "code", None) or "declined"
            raise PermanentFailure(f"Stripe refused: {code}", status_code=status) from None


register(Stripe())
