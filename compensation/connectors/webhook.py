"""A signed generic webhook: each approved item (and, for a helpdesk, each case decision) is POSTed as
JSON to a URL the workspace chose.

The signature follows the convention Stripe and GitHub use: header
`Kintsugi-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>`; a receiver
recomputes it and refuses a stale `t`. `Idempotency-Key` carries the item's execution key, the same on
every retry, so the receiver acts once. Only http(s) URLs without credentials are used, redirects are
not followed, the worker's egress rules apply, and nothing the receiver answers is kept but its status
code. Any answer other than 2xx, or none, is retried with backoff until the last try, then the delivery
is dead-lettered for a person ("deliver again")."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlsplit

import requests
from django.conf import settings

from compensation.connectors.base import Connector, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.connectors.config import secret
from compensation.links import item_payload
from compensation.models import CompensationItem

SECRET_ENV = "KINTSUGI_WEBHOOK_SECRET"
SIGNATURE_HEADER = "Kintsugi-Signature"


def sign(body: bytes, key: str, *, at: int | None = None) -> str:
    t = int(time.time()) if at is None else at
    mac = hmac.new(key.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(body: bytes, header: str, key: str, *, tolerance: int = 300, now: float | None = None) -> bool:
    """What a receiver does: the header's HMAC matches and its timestamp is fresh."""
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        t = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance:
        return False
    return hmac.compare_digest(sign(body, key, at=t).split("v1=", 1)[1], parts.get("v1", ""))


def url_problem(url: str) -> str | None:
    """Why a URL cannot be a webhook target, or None."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the webhook URL must be http(s) with a host"
    if parts.username or parts.password:
        return "the webhook URL must not carry credentials"
    return None


def item_event(item) -> dict:
    """`item.compensates` names each effect the item compensates with the idempotency key it went out
    with (compensation.links), so the receiver finds its own record of it."""
    return {"type": "compensation.approved", "idempotency_key": item.execution_key,
            "workspace": item.incident.workspace.name, "incident": item.incident_id, "item": item_payload(item)}


def post(url: str, key: str, event: dict, *, idempotency_key: str) -> requests.Response:
    problem = url_problem(url)
    if problem:
        raise PermanentFailure(problem)
    body = json.dumps(event, sort_keys=True, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, key),
               "Idempotency-Key": idempotency_key, "User-Agent": "kintsugi-webhook"}
    try:
        return requests.post(url, data=body, headers=headers, allow_redirects=False,
                             timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS)
    except requests.RequestException:
        raise TemporaryFailure("receiver unreachable") from None


class Webhook(Connector):
    name, label = "webhook", "signed webhook"
    kinds = frozenset(CompensationItem.Kind.values)
    resumes_safely = True  # the receiver acts once per Idempotency-Key
    secret_options = {"secret_env": SECRET_ENV}

    def configured(self, options: dict) -> bool:
        return url_problem(options.get("url", "")) is None and bool(secret(options.get("secret_env", SECRET_ENV)))

    def send(self, item, options: dict) -> Outcome:
        key = secret(options.get("secret_env", SECRET_ENV))
        if not key:
            raise PermanentFailure("the webhook's signing secret is not set")
        answer = post(options.get("url", ""), key, item_event(item), idempotency_key=item.execution_key)
        if 200 <= answer.status_code < 300:
            return Outcome("delivered", reference=answer.headers.get("X-Request-Id", "")[:128],
                           status_code=answer.status_code)
        if 300 <= answer.status_code < 400:
            raise TemporaryFailure("receiver redirected (not followed)", status_code=answer.status_code)
        raise TemporaryFailure(f"receiver answered {answer.status_code}", status_code=answer.status_code)


register(Webhook())
