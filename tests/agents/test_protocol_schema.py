"""The recording protocol, typed in the served OpenAPI schema so that someone outside can follow it:
every call's request and answer is a named component, the replay callback is described with its signed
headers, purpose and answers, and the effect kinds and decision keys are written where a client reads."""
import json

import pytest
from rest_framework.test import APIClient

from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.models import Source, Workspace

CALLS = ("get", "set", "ingest", "handoff", "effect", "finish")


@pytest.fixture(scope="module")
def schema() -> dict:
    response = APIClient().get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


def _body_schema(part: dict) -> dict:
    return part["content"]["application/json"]["schema"]


def test_every_recording_call_request_and_answer_is_a_named_component(schema):
    paths = schema["paths"]
    operations = {op: (f"/api/v1/recording/actions/{{action_id}}/{op}/", "post", "200") for op in CALLS}
    operations |= {"open": ("/api/v1/recording/actions/", "post", "201"),
                   "abandon": ("/api/v1/recording/actions/{action_id}/abandon/", "post", "200"),
                   "abandon (DELETE)": ("/api/v1/recording/actions/{action_id}/", "delete", "200"),
                   "describe": ("/api/v1/recording/actions/{action_id}/", "get", "200"),
                   "calls": ("/api/v1/recording/actions/{action_id}/calls/", "post", "200"),
                   "batch": ("/api/v1/recording/batch/", "post", "201")}
    bare = []
    for name, (path, method, status) in operations.items():
        operation = paths[path][method]
        if "$ref" not in _body_schema(operation["responses"][status]):
            bare.append(f"{name} answer")
        if method == "post" and "$ref" not in _body_schema(operation["requestBody"]):
            bare.append(f"{name} request")
    assert bare == []
    components = schema["components"]["schemas"]
    assert {"value", "found"} <= set(components["GetAnswer"]["properties"])
    assert {"committed", "next", "dhash"} <= set(components["FinishAnswer"]["properties"])


def test_the_replay_callback_is_described_with_its_signature_purpose_and_answers(schema):
    registration = schema["paths"]["/api/v1/workspaces/{id}/agents/"]["post"]
    (callback,) = registration["callbacks"]["replay"].values()
    replay = callback["post"]
    assert {p["name"] for p in replay["parameters"] if p["in"] == "header" and p["required"]} == {
        "X-Kintsugi-Timestamp", "X-Kintsugi-Signature"}
    request = schema["components"]["schemas"][_body_schema(replay["requestBody"])["$ref"].rsplit("/", 1)[1]]
    assert {"purpose", "replay_id", "base_url", "token", "action", "payload"} <= set(request["required"])
    purposes = schema["components"]["schemas"][request["properties"]["purpose"]["allOf"][0]["$ref"].rsplit("/", 1)[1]]
    assert purposes["enum"] == ["repair", "verification", "what_if"]
    assert {"200", "202", "401", "500"} <= set(replay["responses"])
    for words in ("perform: false", "handoff", "300 s", "constant time", "blocks"):
        assert words in replay["description"]
    assert "replay_secret" in schema["components"]["schemas"]["RegisteredAgent"]["properties"]


def test_effect_kinds_their_details_decision_keys_and_idempotency_scope_are_in_the_schema(schema):
    components = schema["components"]["schemas"]
    effect = components["EffectRequest"]["properties"]
    assert "{to, subject, body}" in effect["kind"]["description"] and "`refund`" in effect["kind"]["description"]
    assert "Scope: one action" in effect["idempotency_key"]["description"]
    decision = components["FinishRequest"]["properties"]["decision"]["description"]
    for key in ("`choice`", "`level`", "`ticket`", "without floats"):
        assert key in decision


@pytest.mark.django_db(transaction=True)
def test_an_email_effect_without_its_details_is_refused_when_recorded_with_nothing_kept(django_user_model):
    admin = django_user_model.objects.create_superuser("schema-root", "r@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="email-details")
    Source.objects.create(workspace=ws, source_id="kb/a", content="x")
    register_agent(workspace=ws, name="far_notifier", replay="http://127.0.0.1:9/replay", actor=admin, reason="t",
                   via="cli")
    _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    a = api.post("/api/v1/recording/actions/", {"agent": "far_notifier", "payload": {"ticket": "ext-1"}},
                 format="json").json()["action"]
    effect = {"kind": "email", "amount": 0, "idempotency_key": "mail-1", "external": True,
              "details": {"to": "ana@example.com", "subject": "Your refund"}}
    refused = api.post(f"/api/v1/recording/actions/{a}/effect/", effect, format="json")
    assert refused.status_code == 400 and "body" in refused.json()["error"]["message"]
    effect["details"]["body"] = "Refunded."
    answer = api.post(f"/api/v1/recording/actions/{a}/effect/", effect, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["effect"] == 0  # the refused call recorded nothing before it
    dropped = api.delete(f"/api/v1/recording/actions/{a}/?reason=an+outside+test")
    assert dropped.status_code == 200 and dropped.json()["status"] == "abandoned"
