"""Delivery in the real worker, with people acting at once: 20 parallel approvals, tasks delivered
again and a replayed Stripe webhook still make one provider object per item."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from compensation.delivery_models import Delivery, DeliveryState
from compensation.models import CompensationItem
from compensation.review.services import DecisionRefused, approve_item
from compensation.tasks import execute_compensation
from tests.compensation.delivery_support import STRIPE_KEY, WEBHOOK_SECRET, use_connectors
from tests.helpers import repaired_incident, wait_for
from tests.fake_stripe import FakeStripe, signed_event

K, St = CompensationItem.Kind, CompensationItem.Status


@pytest.fixture
def worker_stripe(monkeypatch, settings):
    """The fake Stripe, announced to the worker process through its environment."""
    with FakeStripe() as fake:
        for name, value in (("KINTSUGI_STRIPE_API_KEY", STRIPE_KEY), ("KINTSUGI_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET),
                            ("KINTSUGI_STRIPE_API_BASE", fake.url)):
            monkeypatch.setenv(name, value)
        settings.KINTSUGI_STRIPE_API_BASE = fake.url
        yield fake


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_approvals_and_a_replayed_webhook_make_one_invoice_per_item(
        people, worker_stripe, celery_worker_process, settings, client):
    incident = repaired_incident(flagger=people.lead, settings=settings)
    use_connectors(incident.workspace_id, **{K.REFUND_REVERSAL: ("stripe", {})})
    items = list(incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True))
    assert len(items) >= 4
    refused, start = [], threading.Barrier(20)

    def approve_all():
        start.wait()
        try:
            for item in items:
                try:
                    approve_item(item=item, actor=people.reviewer, reason="checked", via="api")
                except DecisionRefused:
                    refused.append(item.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve_all) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(refused) == 19 * len(items)  # each item approved once, by one of them
    wait_for(lambda: incident.compensation_items.filter(kind=K.REFUND_REVERSAL, status=St.EXECUTED).count() == len(items),
             timeout=90)
    for item in items:  # the same task delivered again
        execute_compensation.delay(item.pk)
    invoice_id = Delivery.objects.filter(item=items[0]).get().reference
    body, sig = signed_event("invoice.paid", {**worker_stripe.objects["invoice"][invoice_id], "status": "paid"},
                             WEBHOOK_SECRET, event_id="evt_paid_once")
    for _ in range(3):
        client.post("/api/v1/webhooks/stripe/", data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=sig)
    time.sleep(3)  # the repeated tasks reach the worker, which finds each item executed
    invoices = worker_stripe.objects["invoice"]
    assert len(invoices) == len(items)
    assert sorted(int(i["metadata"]["kintsugi_item"]) for i in invoices.values()) == sorted(i.pk for i in items)
    assert Delivery.objects.get(item=items[0]).state == DeliveryState.SUCCEEDED
    assert incident.audit_events.filter(action="item.delivery_changed").count() == 1
