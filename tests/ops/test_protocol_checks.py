"""The recording protocol refuses dates that are not dates, fact values over their bound and live
effects on tickets the workspace does not have, with a 400 in the API's error shape and nothing kept."""
from __future__ import annotations

import pytest

from provenance import validation
from provenance.models import Ticket
from tests.agents.test_recording_protocol import post, setup  # noqa: F401  (the fixture, by name)

pytestmark = pytest.mark.django_db(transaction=True)


def _open(client) -> int:
    return post(client, "", {"agent": "http_faq_writer", "payload": {"topic": "t"}}, 201)["action"]


def _refused(body: dict) -> dict:
    assert set(body["error"]) == {"code", "message", "details"}
    return body["error"]


def test_set_refuses_a_date_that_is_not_a_date_and_takes_real_ones(setup):
    _, client = setup("ops-dates")
    a = _open(client)
    error = _refused(post(client, f"{a}/set/", {"key": "faq/x", "value": "v", "valid_from": "not-a-date"}, 400))
    assert "valid_from" in error["message"] and "ISO 8601" in error["message"]
    _refused(post(client, f"{a}/set/", {"key": "faq/x", "value": "v", "observed_at": "2026-13-40"}, 400))
    for good in ("2026-01-01", "2026-01-01T12:00:00Z", "2026-01-01T12:00:00+02:00"):
        post(client, f"{a}/set/", {"key": "faq/x", "value": "v", "valid_from": good})


def test_set_refuses_a_value_over_the_documented_bound(setup):
    _, client = setup("ops-sizes")
    a = _open(client)
    big = "x" * (validation.MAX_RECORDED_FACT_BYTES + 1)
    error = _refused(post(client, f"{a}/set/", {"key": "faq/big", "value": big}, 400))
    assert str(validation.MAX_RECORDED_FACT_BYTES) in error["message"]
    post(client, f"{a}/set/", {"key": "faq/ok", "value": "x" * (validation.MAX_RECORDED_FACT_BYTES - 100)})


def test_a_live_effect_on_an_unknown_ticket_is_refused_unless_said_external(setup):
    ws, client = setup("ops-tickets")
    Ticket.objects.create(workspace=ws, ticket_id="t01", customer_name="Ana", customer_email="ana@example.com",
                          subject="s", body="b", amount_cents=4500)
    a = _open(client)
    error = _refused(post(client, f"{a}/effect/", {"kind": "refund", "amount": 100, "ticket": "t99",
                                                 "idempotency_key": "k1"}, 400))
    assert "t99" in error["message"]
    ok = post(client, f"{a}/effect/", {"kind": "refund", "amount": 100, "ticket": "t01", "idempotency_key": "k2"})
    assert ok["ticket"] == "t01" and ok["effect"] == 0  # the refused call left nothing behind
    external = post(client, f"{a}/effect/", {"kind": "refund", "amount": 100, "ticket": "ext-7", "external": True,
                                             "idempotency_key": "k3"})
    assert external["ticket"] == "ext-7"
    _refused(post(client, f"{a}/effect/", {"kind": "refund", "amount": 1, "ticket": "t01", "external": "yes",
                                           "idempotency_key": "k4"}, 400))
