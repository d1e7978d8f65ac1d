"""The delivery contracts: `manage.py connectors`, an item's `delivery` in the API, the Stripe webhook
endpoint; choosing a connector is a Workspace admin's, audited, and never stores a secret."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compensation.delivery_models import WorkspaceConnector
from compensation.delivery.execution import execute_item
from compensation.models import AuditEvent, CompensationItem
from core.roles import WORKSPACE_ADMIN
from compensation.review.services import approve_item
from tests.helpers import create_user

K = CompensationItem.Kind


def _json(*args) -> dict:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return json.loads(out.getvalue())


def test_connectors_lists_every_kind_with_its_connector_and_whether_it_is_configured(canonical, monkeypatch,
                                                                                     settings, capsys):
    name = canonical.incident.workspace.name
    listing = _json("connectors", "--workspace", name, "--json")
    assert set(listing) == set(K.values)
    assert listing[K.REFUND_REVERSAL] == {"connector": "sandbox_ledger", "configured": True}
    assert listing[K.CORRECTION_EMAIL] == {"connector": "outbox", "configured": True}
    admin = create_user("conn-admin", WORKSPACE_ADMIN, workspaces=[canonical.incident.workspace])
    settings.KINTSUGI_SECRETS = f"TEAM_STRIPE_KEY@{name}=env:TEAM_STRIPE_KEY"  # the operator's registry
    with pytest.raises(SystemExit):  # a key itself is no option: refused, and never echoed
        call_command("connectors", "--workspace", name, "--set", "refund_reversal=stripe", "--options",
                     '{"api_key_env": "TEAM_STRIPE_KEY", "api_key": "sk_live_leak"}', "--user", admin.username,
                     "--reason", "we use Stripe")
    assert "sk_live_leak" not in capsys.readouterr().err and not WorkspaceConnector.objects.exists()
    listing = _json("connectors", "--workspace", name, "--set", "refund_reversal=stripe", "--options",
                    '{"api_key_env": "TEAM_STRIPE_KEY"}', "--user", admin.username, "--reason", "we use Stripe",
                    "--json")
    assert listing[K.REFUND_REVERSAL] == {"connector": "stripe", "configured": False}
    monkeypatch.setenv("TEAM_STRIPE_KEY", "sk_test_x")
    assert _json("connectors", "--workspace", name, "--json")[K.REFUND_REVERSAL]["configured"] is True
    row = WorkspaceConnector.objects.get(workspace=canonical.incident.workspace, kind=K.REFUND_REVERSAL)
    assert row.options == {"api_key_env": "TEAM_STRIPE_KEY"}  # the secret itself was never stored
    event = AuditEvent.objects.get(action="connector.set")
    assert event.actor == admin and event.reason == "we use Stripe" and "sk_live" not in json.dumps(event.data)


@pytest.mark.parametrize("args", [["--set", "refund_reversal=stripe", "--user", "reviewer1", "--reason", "x"],
                                  ["--set", "refund_reversal=smtp", "--user", "root", "--reason", "x"],
                                  ["--set", "refund_reversal=stripe", "--user", "root", "--reason", ""],
                                  ["--set", "nonsense=stripe", "--user", "root", "--reason", "x"]])
def test_choosing_a_connector_is_refused_with_exit_2_and_nothing_changes(canonical, args, capsys):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", "r@example.com", "x")
    with pytest.raises(SystemExit) as exit:
        call_command("connectors", "--workspace", canonical.incident.workspace.name, *args)
    assert exit.value.code == 2 and "error:" in capsys.readouterr().err
    assert not WorkspaceConnector.objects.exists() and not AuditEvent.objects.filter(action="connector.set").exists()


def test_an_approved_item_carries_its_delivery_in_the_api(canonical):
    reviewer = canonical.people.reviewer
    item = canonical.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    api = APIClient()
    api.force_authenticate(reviewer)
    assert api.get(f"/api/v1/review-items/{item.pk}/").json()["delivery"] is None
    approve_item(item=item, actor=reviewer, reason="checked", via="api")
    assert api.get(f"/api/v1/review-items/{item.pk}/").json()["delivery"]["state"] == "queued"
    execute_item(item_id=item.pk)
    delivery = api.get(f"/api/v1/review-items/{item.pk}/").json()["delivery"]
    assert delivery["state"] == "delivered" and delivery["connector"] == "sandbox_ledger"
    assert delivery["attempts"] == 1 and delivery["reference"]
    assert {"state", "connector", "reference", "attempts"} <= set(delivery)


def test_the_stripe_webhook_refuses_an_unsigned_body_with_the_error_shape(db):
    answer = APIClient().post("/api/v1/webhooks/stripe/", {"id": "evt_1", "type": "refund.updated"}, format="json")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_signature"
