"""A stand-in for Stripe's REST API on 127.0.0.1, for tests and benches that drive the real `stripe` client.

It speaks the form-encoded v1 endpoints kintsugi calls (refunds, customers, invoice items, invoices and
their finalize / send), answers Stripe's JSON objects, and keeps Stripe's idempotency rule: a request
whose Idempotency-Key was seen returns the first response, whatever its body. Faults are scripted:
- `fake.fault("500")`: the next request is carried out, then answered 500 (a retry gets the stored answer);
- `fake.fault("hang")`: carried out, then answered only after the client's timeout;
- `fake.fault("refuse")`: answered 402 with a card error, nothing done.
`fake.objects[kind]` holds what was created; `fake.requests` every request (method, path, key, params).
A three-decimal currency's invoice item whose amount does not end in 0 is refused (400), as Stripe does.
`signed_event(type, obj, secret)` builds a webhook body and its Stripe-Signature header.
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

_ids = itertools.count(1)
THREE_DECIMAL = {"bhd", "jod", "kwd", "omr", "tnd"}


def _flat_to_nested(pairs) -> dict:
    out: dict = {}
    for key, value in pairs:
        parts = key.replace("]", "").split("[")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def signed_event(event_type: str, obj: dict, secret: str, *, event_id: str | None = None,
                 at: int | None = None) -> tuple[bytes, str]:
    body = json.dumps({"id": event_id or f"evt_{next(_ids)}", "object": "event", "type": event_type,
                       "api_version": "2025-01-01", "created": int(time.time()),
                       "data": {"object": obj}}).encode()
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return body, f"t={t},v1={mac}"


class FakeStripe:
    def __init__(self, *, hang_seconds: float = 3.0):
        self.objects: dict[str, dict[str, dict]] = {"refund": {}, "customer": {}, "invoiceitem": {}, "invoice": {}}
        self.requests: list[dict] = []
        self.idempotent: dict[str, tuple[int, dict]] = {}
        self.faults: list[str] = []
        self.hang_seconds = hang_seconds
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def fault(self, *kinds: str) -> None:
        self.faults.extend(kinds)

    # --- the API -------------------------------------------------------------------------------------
    def _create(self, kind: str, prefix: str, params: dict, **extra) -> dict:
        obj = {"id": f"{prefix}_{next(_ids):06d}", "object": kind, "created": int(time.time()),
               "livemode": False, "metadata": params.get("metadata", {}), **extra}
        self.objects[kind][obj["id"]] = obj
        return obj

    def handle(self, method: str, path: str, params: dict) -> tuple[int, dict]:
        parts = path.strip("/").split("/")[1:]  # drop "v1"
        if method == "POST" and parts == ["refunds"]:
            target = params.get("payment_intent") or params.get("charge")
            if not target:
                return 400, {"error": {"type": "invalid_request_error", "message": "Missing payment"}}
            return 200, self._create("refund", "re", params, amount=int(params["amount"]), currency="usd",
                                     status="succeeded", payment_intent=params.get("payment_intent"),
                                     charge=params.get("charge"), failure_reason=None)
        if method == "POST" and parts == ["customers"]:
            return 200, self._create("customer", "cus", params, email=params.get("email"))
        if method == "POST" and parts == ["invoiceitems"]:
            if params.get("currency") in THREE_DECIMAL and int(params["amount"]) % 10:
                # Stripe's rule for three-decimal currencies (docs.stripe.com/currencies): last digit 0.
                return 400, {"error": {"type": "invalid_request_error", "code": "amount_invalid",
                                       "message": "Amount must end in 0 for this currency"}}
            return 200, self._create("invoiceitem", "ii", params, customer=params["customer"],
                                     amount=int(params["amount"]), currency=params.get("currency", "usd"))
        if method == "POST" and parts == ["invoices"]:
            items = [i for i in self.objects["invoiceitem"].values()
                     if i["customer"] == params["customer"] and not i.get("invoice")]
            obj = self._create("invoice", "in", params, customer=params["customer"], status="draft",
                               collection_method=params.get("collection_method"),
                               amount_due=sum(i["amount"] for i in items))
            for i in items:
                i["invoice"] = obj["id"]
            return 200, obj
        if method == "POST" and len(parts) == 3 and parts[0] == "invoices" and parts[2] in ("finalize", "send"):
            obj = self.objects["invoice"].get(parts[1])
            if obj is None:
                return 404, {"error": {"type": "invalid_request_error", "message": "No such invoice"}}
            obj["status"] = "open"
            return 200, dict(obj)
        return 404, {"error": {"type": "invalid_request_error", "message": f"Unrecognized request URL {path}"}}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                params = _flat_to_nested(parse_qsl(self.rfile.read(length).decode(), keep_blank_values=True))
                key = self.headers.get("Idempotency-Key")
                with fake.lock:
                    fake.requests.append({"method": "POST", "path": self.path, "key": key, "params": params})
                    fault = fake.faults.pop(0) if fake.faults else None
                    if fault == "refuse":
                        status, body = 402, {"error": {"type": "card_error", "code": "expired_card",
                                                       "message": "Your card has expired."}}
                    elif key and key in fake.idempotent:
                        status, body = fake.idempotent[key]
                    else:
                        status, body = fake.handle("POST", self.path, params)
                        if key:
                            fake.idempotent[key] = (status, body)
                if fault == "hang":
                    time.sleep(fake.hang_seconds)
                if fault == "500":
                    status, body = 500, {"error": {"type": "api_error", "message": "Something went wrong"}}
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if key:
                        self.send_header("Idempotency-Key", key)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler
