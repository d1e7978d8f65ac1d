"""Receiving kintsugi's signed compensation webhooks (the `webhook` connector): check the signature,
then act once per idempotency key. The Python standard library only; copy it anywhere.

kintsugi signs each POST with `Kintsugi-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`
under the secret the workspace's webhook was configured with, and sends the item's execution key as
`Idempotency-Key` (the same on every retry).

    event = verify_event(body, headers["Kintsugi-Signature"], secret)   # BadSignature: answer 400
    for effect in event["item"]["compensates"]:                         # your own keys, as you recorded them
        ...

or serve it: `serve_webhooks("127.0.0.1", 9200, secret, handle)`, where `handle(event)` performs the
compensation (once per `event["idempotency_key"]`: kintsugi retries until it gets a 2xx).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

__all__ = ["SIGNATURE_HEADER", "BadSignature", "serve_webhooks", "sign", "verify", "verify_event"]

SIGNATURE_HEADER = "Kintsugi-Signature"
TOLERANCE_SECONDS = 300


class BadSignature(ValueError):
    """The body is not what kintsugi signed with this secret, or the signature is stale."""


def sign(body: bytes, secret: str, *, at: int | None = None) -> str:
    """The header value kintsugi sends for `body` (for tests of your receiver)."""
    t = int(time.time()) if at is None else at
    return f"t={t},v1={hmac.new(secret.encode(), f'{t}.'.encode() + body, hashlib.sha256).hexdigest()}"


def verify(body: bytes, header: str | None, secret: str, *, tolerance: int = TOLERANCE_SECONDS,
           now: float | None = None) -> bool:
    """True when `header` signs exactly `body` under `secret` and its timestamp is within `tolerance`
    seconds (a replayed old request is refused). Compared in constant time."""
    if not header or not secret:
        return False
    try:
        parts = dict(p.strip().split("=", 1) for p in header.split(","))
        t = int(parts["t"])
        given = parts["v1"]
    except (ValueError, KeyError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance:
        return False
    expected = sign(body, secret, at=t).split("v1=", 1)[1]
    return hmac.compare_digest(expected.encode(), given.encode())


def verify_event(body: bytes, header: str | None, secret: str, *, tolerance: int = TOLERANCE_SECONDS,
                 now: float | None = None) -> dict:
    """The event, once its signature verifies; BadSignature otherwise (parse nothing you have not verified)."""
    if not verify(body, header, secret, tolerance=tolerance, now=now):
        raise BadSignature("the Kintsugi-Signature header does not verify")
    event = json.loads(body)
    if not isinstance(event, dict):
        raise BadSignature("a signed body that is not a JSON object")
    return event


def serve_webhooks(host: str, port: int, secret: str, handle: Callable[[dict], Any], *,
                   block: bool = True) -> ThreadingHTTPServer:
    """An HTTP receiver: a forged or stale request is answered 400 and `handle` never sees it; a handled
    event is answered 200; an exception in `handle` is answered 500, and kintsugi sends it again later."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                event = verify_event(body, self.headers.get(SIGNATURE_HEADER), secret)
            except (BadSignature, ValueError):
                return self._send(400, {"error": "bad signature"})
            try:
                handle(event)
            except Exception as exc:
                return self._send(500, {"error": type(exc).__name__})
            self._send(200, {"received": event.get("idempotency_key")})

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    if block:
        server.serve_forever()
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
