"""Delivering approved items: items per second through each connector against its local server (the
fake Stripe speaking Stripe's REST shape through the real `stripe` client, aiosmtpd for SMTP, a loopback
receiver for the signed webhook), beside the sandbox ledger and outbox measured in the same run.

One repaired canonical desk gives real items; each connector delivers N copies of a money item or an
email item (approved, with their execution keys), timed end to end through compensation.delivery.execution
(lock, deliver, mark executed, audit), one at a time as the worker does. Every delivered copy is
checked: one provider object or message per item."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import common

SIZES = {"quick": 40, "full": 400}


def _items(incident, template, n: int, tag: str) -> list[int]:
    from compensation.models import CompensationItem

    fields = {f.name: getattr(template, f.name) for f in CompensationItem._meta.concrete_fields
              if f.name not in ("id", "draft_key", "execution_key", "created_at", "updated_at", "incident")}
    rows = CompensationItem.objects.bulk_create([
        CompensationItem(**{**fields, "incident": incident, "draft_key": f"bench:{tag}:{i}:{time.time_ns()}",
                            # A ticket of its own: an email copy explains no money item, so none holds it.
                            "ticket_id": f"{template.ticket_id}-{tag[:4]}{i}",
                            "status": CompensationItem.Status.APPROVED}) for i in range(n)])
    for row in rows:
        row.execution_key = f"compensation:{row.pk}"
    CompensationItem.objects.bulk_update(rows, ["execution_key"])
    return [r.pk for r in rows]


def _receiver():
    got = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            got.append(self.headers.get("Idempotency-Key"))
            self.send_response(200)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, got


def run(quick: bool) -> dict:
    import os

    from aiosmtpd.controller import Controller
    from django.conf import settings

    from compensation.delivery_models import Delivery, WorkspaceConnector
    from compensation.delivery.execution import execute_item
    from compensation.models import CompensationItem
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs import job, services
    from repairs.models import Incident
    from tests.compensation.delivery_support import Mailbox, free_port
    from tests.fake_stripe import FakeStripe
    from bench.admin import _superuser

    K = CompensationItem.Kind
    n = SIZES["quick" if quick else "full"]
    name = f"bench-delivery-{int(time.time())}"
    desk_run(workspace=name, reason="bench")
    incident = services.flag_source(workspace=Workspace.objects.get(name=name), source_id=POISONED_PAGE,
                                    actor=_superuser(), reason="bench", via=Incident.Via.CLI)
    incident = job.run_repair(incident_id=incident.pk)
    money = incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).first()
    email = incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True).first()

    mailbox = Mailbox()
    smtp_port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    receiver, hooks = _receiver()
    os.environ.update(KINTSUGI_STRIPE_API_KEY="sk_test_bench", KINTSUGI_WEBHOOK_SECRET="bench-secret")
    rows = []
    try:
        with FakeStripe() as stripe_fake:
            settings.KINTSUGI_STRIPE_API_BASE = stripe_fake.url
            settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp_port
            plan = [("sandbox_ledger", K.REFUND_REVERSAL, money, {}, None),
                    ("stripe", K.REFUND_REVERSAL, money, {}, lambda: len(stripe_fake.objects["invoice"])),
                    ("outbox", K.CORRECTION_EMAIL, email, {}, None),
                    ("smtp", K.CORRECTION_EMAIL, email, {}, lambda: len(mailbox.messages)),
                    ("webhook", K.REFUND_REVERSAL, money, {"url": f"http://127.0.0.1:{receiver.server_address[1]}/h"},
                     lambda: len(hooks))]
            baseline = {}
            for connector, kind, template, options, count in plan:
                WorkspaceConnector.objects.update_or_create(workspace_id=incident.workspace_id, kind=kind,
                                                            defaults={"connector": connector, "options": options})
                before = count() if count else 0
                ids = _items(incident, template, n, connector)
                t0 = time.perf_counter()
                for pk in ids:
                    execute_item(item_id=pk, via="worker")
                seconds = time.perf_counter() - t0
                delivered = Delivery.objects.filter(item_id__in=ids, state__in=["delivered", "accepted", "pending",
                                                                                 "submitted", "succeeded"]).count()
                provider = (count() - before) if count else delivered
                rate = n / seconds
                if connector in ("sandbox_ledger", "outbox"):
                    baseline[kind] = rate
                rows.append({"connector": connector, "kind": kind, "items": n, "seconds": round(seconds, 3),
                             "items_per_s": round(rate, 1), "delivered": delivered, "provider_objects": provider,
                             "vs_sandbox": round(rate / baseline[kind], 2)})
    finally:
        controller.stop()
        receiver.shutdown()
    print(common.table("delivery: approved items delivered one by one through execute_item",
                       ["connector", "kind", "items", "items/s", "x sandbox", "delivered", "provider objects"],
                       [[r["connector"], r["kind"], r["items"], r["items_per_s"], r["vs_sandbox"], r["delivered"],
                         r["provider_objects"]] for r in rows],
                       notes=["sandbox = the demo's ledger / outbox, measured in the same run as the baseline",
                              "provider objects: invoices at the fake Stripe, messages at aiosmtpd, POSTs at the "
                              "receiver; each must equal items"]), flush=True)
    return {"rows": rows}
