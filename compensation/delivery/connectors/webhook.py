"""A signed generic webhook: each approved item (and, for a helpdesk, each case decision) is POSTed as
JSON to a URL the workspace chose.

The signature follows the convention Stripe and GitHub use: header
`Kintsugi-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>`; a receiver
recomputes it and refuses a stale `t`. `Idempotency-Key` carries the item's execution key, the same on
every retry, so the receiver acts once. Only http(s) URLs without credentials are used, the URL passes
the egress policy when it is chosen and again on each send (core.egress: the connection goes to the
address checked, redirects are not followed), and nothing the receiver answers is kept but its status
code and a request id of plain characters. Any answer other than 2xx, or none, is retried with backoff until the last try, then the delivery
is dead-lettered for a person ("deliver again")."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from urllib.parse import urlsplit

from django.conf import settings

from compensation.delivery.connectors.base import Connector, Option, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.drafting.kinds import KindSet
from compensation.delivery.links import item_payload
from core import egress, secret_registry

SECRET_ENV = "KINTSUGI_WEBHOOK_SECRET"
SIGNATURE_HEADER = "Kintsugi-Signature"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


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
    with (compensation.delivery.links), so the receiver finds its own record of it."""
    return {"type": "compensation.approved", "idempotency_key": item.execution_key,
            "workspace": item.incident.workspace.name, "incident": item.incident_id, "item": item_payload(item)}


def post(url: str, key: str, event: dict, *, idempotency_key: str) -> egress.Answer:
    """POST the signed event through the egress door; the 2xx answer, or the failure in fixed words."""
    problem = url_problem(url)
    if problem:
        raise PermanentFailure(problem)
    body = json.dumps(event, sort_keys=True, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, key),
               "Idempotency-Key": idempotency_key, "User-Agent": "kintsugi-webhook"}
    try:
        answer = egress.exchange("POST", url, body=body, headers=headers, max_answer=64 * 1024,
                                 timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS)
    except egress.Unresolved:  # a name server away is an outage like any other: retried
        raise TemporaryFailure("receiver unreachable") from None
    except egress.EgressRefused:
        raise PermanentFailure(egress.Outcome.REFUSED) from None
    except egress.EgressFailed:
        raise TemporaryFailure("receiver unreachable") from None
    if 300 <= answer.status < 400:
        raise TemporaryFailure("receiver redirected (not followed)", status_code=answer.status)
    if not 200 <= answer.status < 300:
        raise TemporaryFailure(f"receiver answered {answer.status}", status_code=answer.status)
    return answer


class Webhook(Connector):
    name, label = "webhook", "signed webhook"
    kinds = KindSet(lambda k: True)  # every registered kind
    resumes_safely = True  # the receiver acts once per Idempotency-Key
    secret_options = {"secret_env": SECRET_ENV}
    schema = {"url": Option(str, role="url", required=True), "secret_env": Option(str, role="secret")}

    def destinations(self, options: dict) -> list[str]:
        return [options["url"]] if options.get("url") else []

    def validate(self, options: dict, *, workspace: str) -> dict:
        problem = url_problem(options.get("url", "")) if isinstance(options.get("url", ""), str) else None
        if problem:
            raise ValueError(problem)
        return super().validate(options, workspace=workspace)

    def configured(self, options: dict, *, workspace: str) -> bool:
        return url_problem(options.get("url", "")) is None and bool(self.secret(options, "secret_env",
                                                                                 workspace=workspace))

    def send(self, item, options: dict) -> Outcome:
        try:
            key = self.secret(options, "secret_env", workspace=item.incident.workspace.name)
        except secret_registry.SecretRefused:
            raise PermanentFailure("the webhook names a secret that is not registered for its workspace") from None
        if not key:
            raise PermanentFailure("the webhook's signing secret is not set")
        answer = post(options.get("url", ""), key, item_event(item), idempotency_key=item.execution_key)
        request_id = answer.headers.get("X-Request-Id", "")
        return Outcome("delivered", reference=request_id if REQUEST_ID.fullmatch(request_id) else "",
                       status_code=answer.status)


register(Webhook())
