"""The last mile for a team whose agents perform their own effects: carrying out the compensations
people approved in kintsugi, in either of two ways. The Python standard library only.

Pull (the workspace chose `agent_pull`: `manage.py connectors --workspace W --set refund_reversal=agent_pull
--user ADMIN --reason ...`), with the workspace's recording token:

    python examples/compensations.py pull --base-url URL --token kag_... [--once] [--performed-log FILE]

Each approved item names the effects it compensates (`compensates`), each with the idempotency key the
agent recorded it under, so the team finds its own record of the payment or email; the item's own
`idempotency_key` goes to the team's provider, so an item offered again is performed once. Then the
agent answers: performed (with its reference) or failed (with why; a person decides what follows).

Push (the workspace chose the signed `webhook` connector with a URL and the variable holding its secret):

    KINTSUGI_WEBHOOK_SECRET=... python examples/compensations.py webhook --port 9200

A request whose `Kintsugi-Signature` does not verify is answered 400 and never acted on; a handled one 200.
kintsugi retries until it gets a 2xx, with the same `Idempotency-Key`: act once per key.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kintsugi_client import Client, KintsugiError  # noqa: E402
from kintsugi_client.compensations import serve_webhooks  # noqa: E402


class Ledger:
    """This team's stand-in for its payment API and mail server: one JSON line per compensation carried
    out, kept once per idempotency key (as a real provider's idempotency keys would)."""

    def __init__(self, path: str | None):
        self.path = path

    def done(self, key: str) -> dict | None:
        if not self.path or not os.path.exists(self.path):
            return None
        with open(self.path) as f:
            return next((row for row in map(json.loads, filter(None, f.read().splitlines())) if row["key"] == key), None)

    def perform(self, item: dict) -> str:
        """Carry out one compensation; returns this team's reference for it."""
        already = self.done(item["idempotency_key"])
        if already is not None:
            return already["reference"]
        # The effects it answers for, by the keys this team recorded them under: its own records.
        own = [e["idempotency_key"] for e in item["compensates"] if e["idempotency_key"]]
        reference = f"comp-{item['id']}"
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps({"key": item["idempotency_key"], "reference": reference, "kind": item["kind"],
                                    "ticket": item["ticket"], "amount_cents": item["amount_cents"],
                                    "compensates": own}) + "\n")
        return reference


def pull(client: Client, ledger: Ledger, *, once: bool, every: float) -> int:
    """Pull what is offered, perform it, answer for it; returns how many were answered."""
    answered = 0
    while True:
        for item in client.pending_compensations():
            try:
                reference = ledger.perform(item)
            except Exception as exc:  # this team's failure: say so, a person decides what follows
                client.ack_compensation(item["id"], "failed", message=f"{type(exc).__name__}: {exc}"[:300])
            else:
                client.ack_compensation(item["id"], "performed", reference=reference)
            answered += 1
        if once:
            return answered
        time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("pull", help="pull approved compensations and acknowledge each")
    p.add_argument("--base-url", required=True)
    p.add_argument("--token", required=True, help="the workspace's recording token (kag_...)")
    p.add_argument("--once", action="store_true", help="one pass, then print how many were answered")
    p.add_argument("--every", type=float, default=10.0, help="seconds between passes")
    p.add_argument("--performed-log", help="where this team's stand-in provider writes what it did")
    w = sub.add_parser("webhook", help="receive signed compensation webhooks")
    w.add_argument("--host", default="127.0.0.1")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--secret-env", default="KINTSUGI_WEBHOOK_SECRET", help="the variable holding the signing secret")
    w.add_argument("--performed-log")
    args = parser.parse_args(argv)
    ledger = Ledger(args.performed_log)
    if args.mode == "pull":
        try:
            answered = pull(Client(args.base_url, args.token), ledger, once=args.once, every=args.every)
        except KintsugiError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"answered": answered}), flush=True)
        return 0
    secret = os.environ.get(args.secret_env, "")
    if not secret:
        print(f"error: {args.secret_env} is not set", file=sys.stderr)
        return 2
    serve_webhooks(args.host, args.port, secret, lambda event: ledger.perform(
        event["item"] | {"idempotency_key": event["idempotency_key"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
