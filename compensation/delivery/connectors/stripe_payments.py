"""Money through Stripe (the `stripe` package).

- A held replacement refund becomes a Refund of the ticket's original payment (a PaymentIntent `pi_...`,
  otherwise a Charge).
- A refund reversal asks the customer for money back the way Stripe offers it: an Invoice, sent to the
  customer for them to pay (collection_method=send_invoice), after a Customer and an InvoiceItem.
Every request carries an Idempotency-Key derived from the item's execution key (one per step), so a
resume after a crash, a timeout or a 500 repeats the request and Stripe returns the first answer: one
refund or invoice per item, whatever happens in between. The object's later states come from signed
webhooks (compensation.delivery.provider_events).

Every request goes through core.egress (EgressClient): the API base (Stripe's, or the operator's
KINTSUGI_STRIPE_API_BASE) is checked when the connector is chosen and on each request, at the address
connected to; the API key comes from the secret registry (core.secret_registry).

Stripe's `amount` is the currency's smallest unit as Stripe counts it (whole yen, thousandths of a dinar),
not kintsugi's hundredths: core.money.minor_units converts, and an amount the currency cannot carry
exactly (¥1,234.50) fails the item before any request, never rounded."""
from __future__ import annotations

import stripe
from django.conf import settings

from compensation.drafting.kinds import MONEY
from compensation.delivery.connectors.base import Connector, Option, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.models import CompensationItem
from core import egress, money, secret_registry

K = CompensationItem.Kind
REFUND_STATES = {"pending": "pending", "requires_action": "pending", "succeeded": "succeeded",
                 "failed": "failed", "canceled": "canceled"}
INVOICE_STATES = {"draft": "submitted", "open": "pending", "paid": "succeeded", "void": "canceled",
                  "uncollectible": "failed"}
API_KEY_ENV = "KINTSUGI_STRIPE_API_KEY"
WEBHOOK_SECRET_ENV = "KINTSUGI_STRIPE_WEBHOOK_SECRET"


STRIPE_API = "https://api.stripe.com"


def api_base() -> str:
    return settings.KINTSUGI_STRIPE_API_BASE or STRIPE_API


class EgressClient(stripe.HTTPClient):
    """The `stripe` library's HTTP client through core.egress: each request resolved and checked, sent to
    the address checked, redirects not followed. A refused destination raises EgressRefused (not retried);
    no answer raises the library's APIConnectionError."""

    name = "kintsugi-egress"

    def __init__(self, *, timeout: float):
        super().__init__()
        self.timeout = timeout

    def request(self, method, url, headers, post_data=None):
        try:
            answer = egress.exchange(method.upper(), url, body=post_data, headers=dict(headers or {}),
                                     timeout=self.timeout, max_answer=4 * 1024 * 1024)
        except egress.Unresolved:
            raise stripe.APIConnectionError("Stripe unreachable", should_retry=False) from None
        except egress.EgressFailed as exc:
            raise stripe.APIConnectionError(f"Stripe {exc.outcome}", should_retry=False) from None
        return answer.body, answer.status, answer.headers

    def request_stream(self, method, url, headers, post_data=None):
        raise NotImplementedError("streamed Stripe answers are not used")

    def close(self):
        pass


def client(options: dict, *, workspace: str) -> stripe.StripeClient:
    return stripe.StripeClient(
        secret_registry.value(options.get("api_key_env") or API_KEY_ENV, workspace=workspace), max_network_retries=0,
        base_addresses={"api": api_base()},
        http_client=EgressClient(timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS))


def _metadata(item) -> dict:
    return {"kintsugi_workspace": str(item.incident.workspace_id), "kintsugi_item": str(item.pk),
            "kintsugi_ticket": item.ticket_id}


def _refund(c: stripe.StripeClient, item, amount: int) -> Outcome:
    ref = item.payment_reference
    params = {"amount": amount, "metadata": _metadata(item),
              ("payment_intent" if ref.startswith("pi_") else "charge"): ref}
    refund = c.v1.refunds.create(params=params, options={"idempotency_key": f"{item.execution_key}:refund"})
    return Outcome(REFUND_STATES.get(refund.status, "submitted"), reference=refund.id, status_code=200)


def _invoice(c: stripe.StripeClient, item, amount: int) -> Outcome:
    key = item.execution_key
    meta = _metadata(item)
    customer = c.v1.customers.create(params={"email": item.customer_email, "metadata": meta},
                                     options={"idempotency_key": f"{key}:customer"})
    c.v1.invoice_items.create(params={"customer": customer.id, "amount": amount,
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
    kinds = MONEY
    resumes_safely = True
    secret_options = {"api_key_env": API_KEY_ENV}
    schema = {"api_key_env": Option(str, role="secret"), "webhook_secret_env": Option(str, role="secret")}
    base_setting = "KINTSUGI_STRIPE_API_BASE"

    def destinations(self, options: dict) -> list[str]:
        return [api_base()]

    def configured(self, options: dict, *, workspace: str) -> bool:
        return bool(self.secret(options, "api_key_env", workspace=workspace))

    def send(self, item, options: dict) -> Outcome:
        try:
            amount = money.minor_units(item.amount_cents, item.currency)
        except money.InexactAmount as e:
            raise PermanentFailure(str(e)) from None
        try:
            c = client(options, workspace=item.incident.workspace.name)
        except secret_registry.SecretRefused:
            raise PermanentFailure("the connector names a secret that is not registered for its workspace") from None
        try:
            return (_refund(c, item, amount) if item.kind == K.REPLACEMENT_REFUND
                    else _invoice(c, item, amount))
        except egress.EgressRefused:
            raise PermanentFailure(egress.Outcome.REFUSED) from None
        except (stripe.APIConnectionError, stripe.RateLimitError) as e:
            raise TemporaryFailure("Stripe unreachable", status_code=getattr(e, "http_status", None)) from None
        except stripe.StripeError as e:
            status = getattr(e, "http_status", None)
            if status is None or status >= 500 or status == 409:
                raise TemporaryFailure(f"Stripe answered {status or 'nothing'}", status_code=status) from None
            code = getattr(e, "code", None) or "declined"
            raise PermanentFailure(f"Stripe refused: {code}", status_code=status) from None


register(Stripe())
