"""Creating is creating: an existing ticket or source is never overwritten by a create; a change is an
explicit update with a reason, and a ticket with executed money keeps its money fields."""
from __future__ import annotations

import pytest

from compensation.models import AuditEvent
from provenance.models import LedgerEntry, Source, Ticket, Workspace
from tests.helpers import client_for

pytestmark = pytest.mark.django_db

TICKET = {"customer_name": "Ana", "customer_email": "ana@example.com", "subject": "Refund", "body": "Broken lamp",
          "amount_cents": 4500}


@pytest.fixture
def desk(make_user):
    ws = Workspace.objects.create(name="ops-creates")
    admin = make_user("ops-admin", roles=["Workspace admin"], workspaces=[ws])
    api = client_for(admin)
    base = f"/api/v1/workspaces/{ws.pk}"
    assert api.post(f"{base}/tickets/", {"ticket_id": "t01", "reason": "r", **TICKET}, format="json").status_code == 201
    assert api.post(f"{base}/sources/", {"source_id": "kb/a", "content": "Full refund.", "reason": "r"},
                    format="json").status_code == 201
    return ws, api, base


def test_creating_an_existing_ticket_is_409_and_changes_nothing(desk):
    ws, api, base = desk
    before = Ticket.objects.get(workspace=ws).as_payload()
    answer = api.post(f"{base}/tickets/", {"ticket_id": "t01", "customer_name": "X", "customer_email": "x@example.com",
                                           "subject": "s", "body": "b", "amount_cents": 5, "reason": "again"},
                      format="json")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "already_exists"
    assert Ticket.objects.get(workspace=ws).as_payload() == before
    assert not AuditEvent.objects.filter(workspace=ws, action="ticket.changed").exists()  # the refusal is audited, no change


def test_creating_an_existing_source_is_409_and_changes_nothing(desk):
    ws, api, base = desk
    answer = api.post(f"{base}/sources/", {"source_id": "kb/a", "content": "Poison.", "reason": "again"}, format="json")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "already_exists"
    assert Source.objects.get(workspace=ws).content == "Full refund."


def test_an_update_changes_what_exists_with_its_reason_and_refuses_what_does_not(desk):
    ws, api, base = desk
    changed = api.put(f"{base}/tickets/", {"ticket_id": "t01", "amount_cents": 5000, "reason": "wrong price"},
                      format="json")
    assert changed.status_code == 200 and Ticket.objects.get(workspace=ws).amount_cents == 5000
    assert AuditEvent.objects.filter(workspace=ws, action="ticket.changed", reason="wrong price").exists()
    assert api.patch(f"{base}/tickets/", {"ticket_id": "t99", "subject": "x", "reason": "r"},
                     format="json").status_code == 404
    assert not Ticket.objects.filter(ticket_id="t99").exists()
    assert api.patch(f"{base}/sources/", {"source_id": "kb/zz", "content": "x", "reason": "r"},
                     format="json").status_code == 404
    title_only = api.patch(f"{base}/sources/", {"source_id": "kb/a", "title": "Returns", "reason": "title"},
                           format="json")
    assert title_only.status_code == 200
    assert Source.objects.values_list("title", "content").get(workspace=ws) == ("Returns", "Full refund.")
    assert api.patch(f"{base}/tickets/", {"ticket_id": "t01", "subject": "x"}, format="json").status_code == 400


def test_a_ticket_with_executed_money_changes_only_its_text(desk):
    ws, api, base = desk
    LedgerEntry.objects.create(workspace=ws, run_number=1, ticket_id="t01", amount_cents=4500, currency="USD",
                               reference="pay-1", idempotency_key="ops-creates-pay-1")
    refused = api.patch(f"{base}/tickets/", {"ticket_id": "t01", "amount_cents": 1, "reason": "r"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "change_refused"
    assert api.patch(f"{base}/tickets/", {"ticket_id": "t01", "customer_email": "evil@example.com", "reason": "r"},
                     format="json").status_code == 409
    assert Ticket.objects.get(workspace=ws).amount_cents == 4500
    text = api.patch(f"{base}/tickets/", {"ticket_id": "t01", "subject": "Refund (lamp)", "amount_cents": 4500,
                                          "reason": "typo"}, format="json")
    assert text.status_code == 200 and Ticket.objects.get(workspace=ws).subject == "Refund (lamp)"
