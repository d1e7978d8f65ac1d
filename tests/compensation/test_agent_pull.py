"""A team that performs its own effects: each item names the effects it compensates with the keys they
went out under; with agent_pull its agent pulls the approved items (recording token, its workspace only)
and acknowledges each through the same Delivery rows the connectors use; and the signed webhook's
receiver helper refuses a forged signature."""
from __future__ import annotations

import io
import json

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from compensation.delivery import deliveries
from compensation.delivery_models import Delivery, DeliveryAttempt, DeliveryState, delivery_needs_person
from compensation.delivery.execution import execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from kintsugi_client.compensations import BadSignature, serve_webhooks, sign, verify_event
from provenance.recording.effects import idempotency_key
from provenance.models import LedgerEntry, Workspace
from provenance.access.onboarding import issue_agent_token
from tests.compensation.delivery_support import use_connectors
from tests.helpers import free_port

K, St, S = CompensationItem.Kind, CompensationItem.Status, DeliveryState
PULL = "/api/v1/recording/compensations/"


def _ack_url(pk) -> str:
    return f"{PULL}{pk}/ack/"


def _token(workspace) -> tuple[object, APIClient]:
    root = get_user_model().objects.filter(is_superuser=True).first() or get_user_model().objects.create_superuser(
        "pull-root", "root@example.com", "x")
    token, key = issue_agent_token(workspace=workspace, label="our agent", actor=root, reason="pull", via="cli")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return token, api


def _reversals(incident, n: int) -> list[CompensationItem]:
    items = list(incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True, status=St.PENDING)
                 .order_by("pk")[:n])
    assert len(items) == n
    return items


def _offer(incident, reviewer, n: int = 2) -> list[CompensationItem]:
    """Approve `n` reversals of a workspace that chose agent_pull, and run their execution."""
    use_connectors(incident.workspace_id, **{K.REFUND_REVERSAL: ("agent_pull", {})})
    items = _reversals(incident, n)
    for item in items:
        approve_item(item=item, actor=reviewer, reason="checked", via="api")
        execute_item(item_id=item.pk)
    return [CompensationItem.objects.get(pk=i.pk) for i in items]


# --- link-back ------------------------------------------------------------------------------------------
def test_a_review_item_names_the_effects_it_compensates_with_the_keys_they_went_out_under(canonical):
    incident = canonical.incident
    item = _reversals(incident, 1)[0]
    api = APIClient()
    api.force_authenticate(canonical.people.reviewer)
    shown = api.get(f"/api/v1/review-items/{item.pk}/").json()["compensates"]
    assert shown and {e["effect_id"] for e in shown} == {e["effect_id"] for e in item.original}
    for effect in shown:
        assert set(effect) == {"action_id", "effect_id", "role", "kind", "ticket", "amount_cents", "currency",
                               "idempotency_key"}
        assert effect["ticket"] == item.ticket_id
        if effect["role"] == "invalidated":
            # The refund that left: the key it went out with, under which the ledger holds it.
            key = idempotency_key(incident.workspace.name, incident.run_number, effect["effect_id"])
            assert effect["idempotency_key"] == key
            assert LedgerEntry.objects.get(idempotency_key=key).amount_cents == effect["amount_cents"]
        else:
            assert effect["idempotency_key"] is None  # a held replacement never left
    assert any(e["role"] == "invalidated" for e in shown)
    listed = api.get("/api/v1/review-items/", {"incident": incident.pk, "kind": K.REFUND_REVERSAL}).json()["results"]
    assert next(r for r in listed if r["id"] == item.pk)["compensates"] == shown


def test_the_schema_types_compensates_and_the_pull_endpoints(client):
    schema = client.get("/api/v1/schema/?format=json").json()
    review = schema["components"]["schemas"]["ReviewItem"]["properties"]["compensates"]
    assert review["items"]["$ref"].endswith("/CompensatedEffect")
    effect = schema["components"]["schemas"]["CompensatedEffect"]
    assert effect["properties"]["idempotency_key"]["nullable"] is True
    assert set(effect["required"]) >= {"action_id", "effect_id", "kind", "ticket", "amount_cents", "idempotency_key"}
    assert "get" in schema["paths"]["/api/v1/recording/compensations/"]
    ack = schema["paths"]["/api/v1/recording/compensations/{item_id}/ack/"]["post"]
    assert ack["security"] == [{"recordingToken": []}]


# --- choosing agent_pull --------------------------------------------------------------------------------
def test_a_workspace_chooses_agent_pull_per_kind_with_the_connectors_command(canonical):
    from core.roles import WORKSPACE_ADMIN
    from tests.helpers import create_user

    ws = canonical.incident.workspace
    admin = create_user("pull-admin", WORKSPACE_ADMIN, workspaces=[ws])
    out = io.StringIO()
    call_command("connectors", "--workspace", ws.name, "--set", "refund_reversal=agent_pull", "--user",
                 admin.username, "--reason", "our agent refunds itself", "--json", stdout=out)
    assert json.loads(out.getvalue())[K.REFUND_REVERSAL] == {"connector": "agent_pull", "configured": True}
    assert AuditEvent.objects.get(action="connector.set").data["connector"] == "agent_pull"


# --- pull -----------------------------------------------------------------------------------------------
def test_pull_lists_only_approved_items_offered_to_the_tokens_workspace(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    offered = _offer(incident, reviewer, 3)
    for item in offered:  # offered, not performed: still approved, nothing left
        assert item.status == St.APPROVED and item.delivery.state == S.AWAITING_ACK
        assert item.delivery.connector == "agent_pull" and item.executed_at is None
    still_pending = _reversals(incident, 1)[0]
    email = incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True, status=St.PENDING).first()
    approve_item(item=email, actor=reviewer, reason="checked", via="api")
    execute_item(item_id=email.pk)  # its kind still goes through the outbox: not the agent's
    _, api = _token(incident.workspace)

    first = api.get(PULL, {"state": "pending", "limit": 2})
    assert first.status_code == 200, first.content
    page = first.json()
    assert [r["id"] for r in page["results"]] == [i.pk for i in offered[:2]]
    assert f"after={offered[1].pk}" in page["next"]
    second = api.get(page["next"]).json()
    assert [r["id"] for r in second["results"]] == [offered[2].pk] and second["next"] is None
    row = page["results"][0]
    assert row["idempotency_key"] == offered[0].execution_key
    assert row["workspace"] == incident.workspace.name and row["amount_cents"] == offered[0].amount_cents
    assert [e["effect_id"] for e in row["compensates"]] == [e["effect_id"] for e in offered[0].original]
    assert still_pending.pk not in [r["id"] for r in page["results"] + second["results"]]

    other = Workspace.objects.create(name="pull-other")
    _, foreign = _token(other)
    assert foreign.get(PULL).json() == {"results": [], "next": None}
    for query in ({"state": "failed"}, {"limit": 0}, {"limit": 201}, {"after": "x"}, {"after": "1\x00"}):
        refused = api.get(PULL, query)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid", query
    assert APIClient().get(PULL).status_code in (401, 403)  # no token, nothing listed


def _limited_token(workspace, *agents) -> APIClient:
    root = get_user_model().objects.filter(is_superuser=True).first()
    _, key = issue_agent_token(workspace=workspace, label=f"only {'+'.join(agents)}", agents=list(agents), actor=root,
                               reason="a team's own agents", via="cli")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def _offer_refunds_and_mail(incident, reviewer) -> tuple[list[CompensationItem], CompensationItem]:
    """Two reversals of the refund agent's refunds and a correction of the notifier's mail, offered."""
    use_connectors(incident.workspace_id, **{K.REFUND_REVERSAL: ("agent_pull", {}),
                                             K.CORRECTION_EMAIL: ("agent_pull", {})})
    items = _reversals(incident, 2) + [incident.compensation_items.filter(
        kind=K.CORRECTION_EMAIL, valid=True, status=St.PENDING).order_by("pk").first()]
    for item in items:
        approve_item(item=item, actor=reviewer, reason="checked", via="api")
        execute_item(item_id=item.pk)
    return items[:2], items[2]


def _pulled(api) -> list[int]:
    answer = api.get(PULL)
    assert answer.status_code == 200, answer.content
    return [r["id"] for r in answer.json()["results"]]


def test_a_token_limited_to_agents_pulls_only_the_items_compensating_their_actions(canonical):
    incident = canonical.incident
    reversals, email = _offer_refunds_and_mail(incident, canonical.people.reviewer)
    ws = incident.workspace
    everything = sorted([i.pk for i in reversals] + [email.pk])
    assert _pulled(_token(ws)[1]) == everything  # an unrestricted token: its whole workspace
    assert _pulled(_limited_token(ws, "refund", "notifier")) == everything
    assert _pulled(_limited_token(ws, "refund")) == [i.pk for i in reversals]
    assert _pulled(_limited_token(ws, "notifier")) == [email.pk]
    assert _pulled(_limited_token(ws, "triage")) == []


def test_an_item_whose_actions_agent_is_unknown_is_not_offered_to_a_limited_token(canonical):
    from repairs.models import ActionOutcome

    incident = canonical.incident
    reversals, _ = _offer_refunds_and_mail(incident, canonical.people.reviewer)
    first = reversals[0].original[0]
    ActionOutcome.objects.filter(incident_id=first["incident"], action_id=first["action_id"]).delete()
    assert _pulled(_limited_token(incident.workspace, "refund")) == [reversals[1].pk]
    assert reversals[0].pk in _pulled(_token(incident.workspace)[1])


def test_a_limited_token_acknowledging_another_agents_item_gets_404_and_changes_nothing(canonical):
    incident = canonical.incident
    reversals, email = _offer_refunds_and_mail(incident, canonical.people.reviewer)
    mail_team = _limited_token(incident.workspace, "notifier")
    refused = mail_team.post(_ack_url(reversals[0].pk), {"outcome": "performed"}, format="json")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert Delivery.objects.get(item=reversals[0]).state == S.AWAITING_ACK
    assert not AuditEvent.objects.filter(action="item.delivery_acknowledged").exists()
    # Its own item is acknowledged as any token's would be.
    assert mail_team.post(_ack_url(email.pk), {"outcome": "performed"}, format="json").status_code == 200
    assert _limited_token(incident.workspace, "refund").post(
        _ack_url(reversals[0].pk), {"outcome": "performed"}, format="json").status_code == 200
    assert CompensationItem.objects.get(pk=reversals[0].pk).status == St.EXECUTED


# --- acknowledgement ------------------------------------------------------------------------------------
def test_ack_performed_delivers_and_executes_the_item_audited_and_again_is_the_same_answer(canonical):
    incident = canonical.incident
    item = _offer(incident, canonical.people.reviewer, 1)[0]
    token, api = _token(incident.workspace)
    body = {"outcome": "performed", "reference": "re_123", "message": "refund reversed in our PSP"}
    first = api.post(_ack_url(item.pk), body, format="json")
    assert first.status_code == 200, first.content
    answer = first.json()
    assert answer | {"acknowledged_at": None} == {
        "id": item.pk, "outcome": "performed", "reference": "re_123", "message": "refund reversed in our PSP",
        "delivery_state": "delivered", "item_status": "executed", "acknowledged_at": None}
    item.refresh_from_db()
    delivery = Delivery.objects.get(item=item)
    assert item.status == St.EXECUTED and item.executed_at is not None
    assert (delivery.state, delivery.reference, delivery.connector) == (S.DELIVERED, "re_123", "agent_pull")
    assert DeliveryAttempt.objects.filter(delivery=delivery, outcome=S.DELIVERED).count() == 1
    ack = AuditEvent.objects.get(action="item.delivery_acknowledged", subject_id=str(item.pk))
    assert ack.actor_name == f"agent-token:{token.prefix}" and ack.workspace_id == incident.workspace_id
    assert (ack.from_status, ack.to_status) == (S.AWAITING_ACK, S.DELIVERED)
    assert ack.data["idempotency_key"] == item.execution_key and ack.data["reference"] == "re_123"
    assert AuditEvent.objects.filter(action="item.executed", subject_id=str(item.pk)).count() == 1
    # The review desk shows it like any connector's delivery.
    reviewer_api = APIClient()
    reviewer_api.force_authenticate(canonical.people.reviewer)
    shown = reviewer_api.get(f"/api/v1/review-items/{item.pk}/").json()
    assert shown["delivery"]["state"] == "delivered" and shown["delivery"]["connector"] == "agent_pull"
    assert "delivered via the team's agent (pull)" in deliveries.words(item)

    # The agent's retry after a lost answer: the same answer, nothing written.
    again = api.post(_ack_url(item.pk), body | {"message": "sent twice"}, format="json")
    assert again.status_code == 200 and again.json() == answer
    assert AuditEvent.objects.filter(action="item.delivery_acknowledged").count() == 1
    # A different answer is a conflict, and changes nothing.
    for conflicting in ({"outcome": "failed"}, {"outcome": "performed", "reference": "re_999"}):
        refused = api.post(_ack_url(item.pk), conflicting, format="json")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.reference) == (S.DELIVERED, "re_123")
    assert api.get(PULL).json()["results"] == []


def test_ack_failed_is_visible_for_a_person_and_delivering_again_offers_it_once_more(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    item = _offer(incident, reviewer, 1)[0]
    _, api = _token(incident.workspace)
    answer = api.post(_ack_url(item.pk), {"outcome": "failed", "message": "card expired"}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["delivery_state"] == "failed" and answer.json()["item_status"] == "approved"
    item = CompensationItem.objects.select_related("delivery").get(pk=item.pk)
    assert item.status == St.APPROVED and delivery_needs_person(item)
    assert item.delivery.failure_reason == "card expired"
    assert deliveries.words(item).endswith("card expired")
    assert api.get(PULL).json()["results"] == []
    assert api.post(_ack_url(item.pk), {"outcome": "failed", "message": "card expired"},
                    format="json").json() == answer.json()
    assert api.post(_ack_url(item.pk), {"outcome": "performed"}, format="json").status_code == 409

    deliveries.deliver_again(item=item, actor=reviewer, reason="customer updated the card", via="api")
    execute_item(item_id=item.pk)
    offered = api.get(PULL).json()["results"]
    assert [r["id"] for r in offered] == [item.pk] and offered[0]["idempotency_key"] == item.execution_key
    assert api.post(_ack_url(item.pk), {"outcome": "performed", "reference": "re_2"}, format="json").status_code == 200
    assert CompensationItem.objects.get(pk=item.pk).status == St.EXECUTED


def test_another_workspaces_item_and_unknown_ids_are_404_and_change_nothing(canonical):
    incident = canonical.incident
    item = _offer(incident, canonical.people.reviewer, 1)[0]
    never_offered = _reversals(incident, 1)[0]
    _, foreign = _token(Workspace.objects.create(name="pull-foreign"))
    _, api = _token(incident.workspace)
    for client, pk in ((foreign, item.pk), (api, never_offered.pk), (api, 987654321), (api, 2 ** 70)):
        refused = client.post(_ack_url(pk), {"outcome": "performed"}, format="json")
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", pk
    assert Delivery.objects.get(item=item).state == S.AWAITING_ACK
    assert not AuditEvent.objects.filter(action="item.delivery_acknowledged").exists()
    assert AuditEvent.objects.filter(action="refused", workspace__name="pull-foreign").exists()


@pytest.mark.parametrize("body", [
    {"outcome": "done"},
    {},
    {"outcome": "performed", "extra": 1},
    {"outcome": "performed", "reference": "re\x00x"},
    {"outcome": "performed", "message": "ok\x00"},
    {"outcome": "performed", "reference": "r" * 129},
    {"outcome": "failed", "message": "m" * 301},
    ["performed"],
    "performed",
])
def test_a_malformed_ack_is_400_and_changes_nothing(canonical, body):
    incident = canonical.incident
    item = _offer(incident, canonical.people.reviewer, 1)[0]
    _, api = _token(incident.workspace)
    refused = api.post(_ack_url(item.pk), body, format="json")
    assert refused.status_code == 400, refused.content
    assert Delivery.objects.get(item=item).state == S.AWAITING_ACK
    assert not AuditEvent.objects.filter(action="item.delivery_acknowledged").exists()


def test_a_body_that_is_not_json_is_400(canonical):
    incident = canonical.incident
    item = _offer(incident, canonical.people.reviewer, 1)[0]
    _, api = _token(incident.workspace)
    refused = api.post(_ack_url(item.pk), b'{"outcome": "perf', content_type="application/json")
    assert refused.status_code == 400
    assert Delivery.objects.get(item=item).state == S.AWAITING_ACK


# --- the signed webhook and its receiver helper ---------------------------------------------------------
SECRET = "whsec_team_receiver_not_real"


def test_the_webhook_carries_compensates_and_the_receiver_helper_verifies_its_signature(canonical, monkeypatch,
                                                                                       settings):
    incident = canonical.incident
    received, port = [], free_port()
    server = serve_webhooks("127.0.0.1", port, SECRET, received.append, block=False)
    try:
        settings.KINTSUGI_SECRETS = "TEAM_WEBHOOK_SECRET=env:TEAM_WEBHOOK_SECRET"  # the operator's registry
        monkeypatch.setenv("TEAM_WEBHOOK_SECRET", SECRET)
        use_connectors(incident.workspace_id, **{K.REFUND_REVERSAL: (
            "webhook", {"url": f"http://127.0.0.1:{port}/kintsugi", "secret_env": "TEAM_WEBHOOK_SECRET"})})
        item = _reversals(incident, 1)[0]
        approve_item(item=item, actor=canonical.people.reviewer, reason="checked", via="api")
        item = execute_item(item_id=item.pk)
        assert item.status == St.EXECUTED and item.delivery.state == S.DELIVERED
        assert len(received) == 1
        event = received[0]
        assert event["idempotency_key"] == item.execution_key
        keys = {e["effect_id"]: e["idempotency_key"] for e in event["item"]["compensates"]}
        invalidated = [e["effect_id"] for e in item.original if e["role"] == "invalidated"]
        assert invalidated and all(keys[e] == idempotency_key(incident.workspace.name, incident.run_number, e)
                                   for e in invalidated)

        # Red: a forged, tampered or stale request is answered 400 and never reaches the handler.
        body = json.dumps(event).encode()
        for header, sent in ((sign(body, "whsec_someone_else"), body),
                             (sign(body, SECRET), body.replace(b"refund", b"refunD")),
                             (sign(body, SECRET, at=1_000_000), body),
                             ("t=1,v1=deadbeef", body), ("", body)):
            answer = requests.post(f"http://127.0.0.1:{port}/kintsugi", data=sent, timeout=5,
                                   headers={"Kintsugi-Signature": header} if header else {})
            assert answer.status_code == 400
            with pytest.raises(BadSignature):
                verify_event(sent, header, SECRET)
        assert len(received) == 1
        assert verify_event(body, sign(body, SECRET), SECRET) == event  # and a good one verifies
    finally:
        server.shutdown()
        server.server_close()


def test_the_receiver_helper_agrees_with_the_connectors_signature():
    from compensation.delivery.connectors import webhook

    body = b'{"type":"compensation.approved"}'
    header = webhook.sign(body, SECRET)
    assert verify_event(body, header, SECRET) == {"type": "compensation.approved"}
    assert webhook.verify(body, sign(body, SECRET), SECRET)
    with pytest.raises(BadSignature):
        verify_event(body, header, SECRET + "x")
