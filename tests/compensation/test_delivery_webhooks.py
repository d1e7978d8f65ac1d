"""Stripe's signed events move a delivery's state; anything unsigned, replayed, unknown or another
workspace's changes nothing. The generic signed webhook delivers with retries, a dead letter and a log."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.cache import cache

from compensation.delivery import deliveries
from compensation.delivery.connectors import TemporaryFailure, webhook
from compensation.delivery_models import Delivery, DeliveryState, ProviderEvent
from compensation.delivery.execution import execute_item
from compensation.models import CompensationItem
from compensation.delivery.provider_events import REFUSED_COUNTER
from compensation.review.services import approve_item
from tests.compensation.delivery_support import (  # noqa: F401
    WEBHOOK_SECRET, desk, fake_stripe, smtp_server, use_connectors)
from tests.fake_stripe import signed_event

K, St, S = CompensationItem.Kind, CompensationItem.Status, DeliveryState
URL = "/api/v1/webhooks/stripe/"


def _delivered_reversal(desk) -> CompensationItem:
    item = desk.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    approve_item(item=item, actor=desk.people.reviewer, reason="checked", via="admin")
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.delivery.state == S.PENDING
    return item


def _post(client, body: bytes, signature: str | None):
    headers = {"HTTP_STRIPE_SIGNATURE": signature} if signature else {}
    return client.post(URL, data=body, content_type="application/json", **headers)


def test_signed_invoice_events_move_the_delivery_once_and_a_replay_changes_nothing(desk, client):
    item = _delivered_reversal(desk)
    invoice = desk.stripe.objects["invoice"][item.delivery.reference]
    body, sig = signed_event("invoice.marked_uncollectible", {**invoice, "status": "uncollectible"}, WEBHOOK_SECRET,
                             event_id="evt_uncollectible")
    answer = _post(client, body, sig)
    assert answer.status_code == 200 and answer.json() == {"outcome": "applied"}
    item.delivery.refresh_from_db()
    assert item.delivery.state == S.FAILED
    assert _post(client, body, sig).json() == {"outcome": "duplicate"}
    assert desk.incident.audit_events.filter(action="item.delivery_changed").count() == 1
    body, sig = signed_event("invoice.paid", {**invoice, "status": "paid"}, WEBHOOK_SECRET)
    assert _post(client, body, sig).json() == {"outcome": "applied"}
    item.delivery.refresh_from_db()
    assert item.delivery.state == S.SUCCEEDED and item.delivery.failure_reason == ""


def test_a_refund_failing_after_success_was_reported_says_so_and_reopens_the_case(desk, client):
    from compensation.review import cases
    from tests.compensation.test_delivery_money_and_mail import _replacement_refund

    item = _replacement_refund(desk)
    approve_item(item=item, actor=desk.people.reviewer, reason="checked", via="admin")
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.delivery.state == S.SUCCEEDED and item.status == St.EXECUTED
    refund = desk.stripe.objects["refund"][item.delivery.reference]
    body, sig = signed_event("refund.failed", {**refund, "status": "failed",
                                               "failure_reason": "expired_or_canceled_card"}, WEBHOOK_SECRET)
    assert _post(client, body, sig).json() == {"outcome": "applied"}
    item.delivery.refresh_from_db()
    assert item.delivery.state == S.FAILED and item.delivery.failure_reason == "expired_or_canceled_card"
    case = cases.case(user=desk.people.reviewer, incident_id=item.incident_id, ticket=item.ticket_id)
    assert case.state == cases.CaseState.DELIVERY_FAILED


@pytest.mark.parametrize("signature", [None, "t=1,v1=deadbeef", "garbage"])
def test_a_webhook_without_a_valid_signature_is_400_and_changes_nothing(desk, client, signature):
    item = _delivered_reversal(desk)
    invoice = desk.stripe.objects["invoice"][item.delivery.reference]
    body, good = signed_event("invoice.paid", {**invoice, "status": "paid"}, "whsec_someone_else")
    before = cache.get(REFUSED_COUNTER) or 0
    answer = _post(client, body, signature or None)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_signature"
    assert _post(client, body, good).status_code == 400  # signed, but with a secret nobody configured
    item.delivery.refresh_from_db()
    assert item.delivery.state == S.PENDING and not ProviderEvent.objects.exists()
    assert (cache.get(REFUSED_COUNTER) or 0) == before + 2


def test_unknown_events_and_another_workspaces_objects_change_nothing_and_are_kept(desk, client, monkeypatch,
                                                                                   settings):
    item = _delivered_reversal(desk)
    invoice = desk.stripe.objects["invoice"][item.delivery.reference]
    body, sig = signed_event("customer.created", {"id": "cus_x", "object": "customer"}, WEBHOOK_SECRET)
    assert _post(client, body, sig).json() == {"outcome": "unknown object"}
    body, sig = signed_event("invoice.paid", {**invoice, "status": "paid", "metadata": {"kintsugi_workspace": "999999"}},
                             WEBHOOK_SECRET)
    assert _post(client, body, sig).json() == {"outcome": "another workspace"}
    # A workspace's own signing secret signs only its own objects.
    from compensation.delivery_models import WorkspaceConnector
    from provenance.models import Workspace

    other = Workspace.objects.create(name="delivery-other")
    WorkspaceConnector.objects.create(workspace=other, kind=K.REFUND_REVERSAL, connector="stripe",
                                      options={"webhook_secret_env": "OTHER_WHSEC"})
    settings.KINTSUGI_SECRETS = "OTHER_WHSEC@delivery-other=env:OTHER_WHSEC"  # the operator's registry
    monkeypatch.setenv("OTHER_WHSEC", "whsec_other_team")
    monkeypatch.delenv("KINTSUGI_STRIPE_WEBHOOK_SECRET")
    body, sig = signed_event("invoice.paid", {**invoice, "status": "paid"}, "whsec_other_team")
    assert _post(client, body, sig).json() == {"outcome": "another workspace"}
    item.delivery.refresh_from_db()
    assert item.delivery.state == S.PENDING
    assert sorted(ProviderEvent.objects.values_list("outcome", flat=True)) == [
        "another workspace", "another workspace", "unknown object"]


class Receiver:
    """A helpdesk-like receiver on loopback: verifies the signature, answers as scripted."""

    def __init__(self):
        self.got, self.answers = [], []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = webhook.verify(body, self.headers.get(webhook.SIGNATURE_HEADER, ""), "hook-secret")
                status = receiver.answers.pop(0) if receiver.answers else (200 if ok else 401)
                receiver.got.append((ok, self.headers.get("Idempotency-Key"), json.loads(body), status))
                self.send_response(status)
                if status in (301, 302):
                    self.send_header("Location", "ftp://127.0.0.1:21/")
                self.end_headers()
                self.wfile.write(b"<script>alert(1)</script> internal detail")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/kintsugi"


@pytest.fixture
def receiver(monkeypatch, settings):
    monkeypatch.setenv("KINTSUGI_WEBHOOK_SECRET", "hook-secret")
    settings.KINTSUGI_DELIVERY_MAX_ATTEMPTS = 3
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def test_the_signed_webhook_delivers_retries_dead_letters_and_is_delivered_again(desk, receiver):
    use_connectors(desk.incident.workspace_id, **{K.REFUND_REVERSAL: ("webhook", {"url": receiver.url})})
    item = desk.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    approve_item(item=item, actor=desk.people.reviewer, reason="checked", via="admin")
    receiver.answers = [500, 302, 503]
    for _ in range(2):
        with pytest.raises(TemporaryFailure):
            execute_item(item_id=item.pk)
        Delivery.objects.filter(item=item).update(next_attempt_at=None)
    execute_item(item_id=item.pk)  # the third and last try
    delivery = Delivery.objects.get(item=item)
    assert delivery.state == S.DEAD and delivery.attempts == 3
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 302, 503]
    assert "script" not in " ".join(a.detail for a in delivery.attempt_log.all())
    assert len(receiver.got) == 3  # the redirect to ftp:// was not followed
    deliveries.deliver_again(item=item, actor=desk.people.reviewer, reason="receiver fixed", via="admin")
    execute_item(item_id=item.pk)
    item.refresh_from_db()
    assert item.status == St.EXECUTED and item.delivery.state == S.DELIVERED
    ok, key, event, status = receiver.got[-1]
    assert ok and status == 200 and key == item.execution_key
    assert event["item"]["id"] == item.pk and event["item"]["amount_cents"] == item.amount_cents
    assert len({k for _, k, _, _ in receiver.got}) == 1  # every try carries the same Idempotency-Key


def test_a_forged_or_stale_signature_fails_verification():
    body = b'{"a": 1}'
    good = webhook.sign(body, "k", at=1000)
    assert webhook.verify(body, good, "k", now=1000)
    assert not webhook.verify(body, good, "other", now=1000)
    assert not webhook.verify(body + b" ", good, "k", now=1000)
    assert not webhook.verify(body, good, "k", now=1000 + 301)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "https://user:pw@example.com/x", "javascript:alert(1)", ""])
def test_a_webhook_url_that_is_not_plain_https_is_refused_when_chosen(desk, url):
    from provenance.models import Workspace

    admin = desk.people.lead.__class__.objects.create_superuser("hookadmin", "h@example.com", "x")
    with pytest.raises(ValueError):
        deliveries.set_connector(workspace=Workspace.objects.get(pk=desk.incident.workspace_id), kind=K.REFUND_REVERSAL,
                                 name="webhook", options={"url": url}, actor=admin, reason="helpdesk", via="cli")
