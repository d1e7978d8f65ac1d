"""The protocol's batch forms: several calls of one action in one request, and a whole finished recording
in one request. Each writes the graph the in-process recorder writes; a failing call is named and
nothing of its batch lands, in Postgres or in the graph."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import LedgerEntry, Recording, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import record_root
from tests.agents.test_recording_protocol import _shape

pytestmark = pytest.mark.django_db(transaction=True)

WRITER = [{"op": "set", "key": "faq/returns", "value": "30 days", "valid_from": "2026-01-01"},
          {"op": "handoff", "agent": "http_faq_reader", "payload": {"topic": "returns"}},
          {"op": "finish", "decision": {"topic": "returns"}}]
READER = [{"op": "get", "key": "faq/returns"}, {"op": "finish", "decision": {"has_answer": True}}]


@pytest.fixture
def setup(django_user_model):
    import tests.agents_example  # noqa: F401  (registers faq_writer / faq_reader in-process)

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")

    def make(name: str):
        ws = Workspace.objects.create(name=name)
        for agent in ("http_faq_writer", "http_faq_reader"):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return ws, client
    return make


def post(client, path, body, status=200):
    response = client.post(f"/api/v1/recording/{path}", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def _in_process(name="in-process"):
    Workspace.objects.create(name=name)
    record_root(workspace=name, agent="faq_writer",
                payload={"topic": "returns", "answer": "30 days", "valid_from": "2026-01-01"})


def _nothing_in_the_graph(ws):
    assert workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0] == 0


def test_calls_of_one_action_in_one_request_answer_each_as_alone_and_record_the_same_graph(setup):
    ws, client = setup("calls")
    a = post(client, "actions/", {"agent": "http_faq_writer", "payload": {
        "topic": "returns", "answer": "30 days", "valid_from": "2026-01-01"}}, 201)["action"]
    results = post(client, f"actions/{a}/calls/", {"calls": WRITER})["results"]
    assert results[0] == {"key": "faq/returns", "written": True}
    assert results[1] == {"agent": "http_faq_reader", "position": 0}
    assert results[2]["committed"] is False and results[2]["next"]["agent"] == "http_faq_reader"
    b = post(client, "actions/", {"agent": "http_faq_reader", "parent": a}, 201)["action"]
    results = post(client, f"actions/{b}/calls/", {"calls": READER})["results"]
    assert results[0] == {"key": "faq/returns", "value": "30 days", "found": True}
    assert results[1]["committed"] is True and results[1]["actions"] == [a, b]
    _in_process()
    assert _shape("calls") == _shape("in-process")


def test_a_whole_recording_in_one_request_records_what_the_in_process_recorder_records(setup):
    ws, client = setup("whole")
    done = post(client, "batch/", {"actions": [
        {"agent": "http_faq_writer", "payload": {"topic": "returns", "answer": "30 days",
                                                 "valid_from": "2026-01-01"}, "parent": None, "calls": WRITER},
        {"agent": "http_faq_reader", "parent": 0, "calls": READER}]}, 201)
    assert done["committed"] is True and len(done["actions"]) == 2
    assert done["results"][1][0] == {"key": "faq/returns", "value": "30 days", "found": True}
    _in_process()
    assert _shape("whole") == _shape("in-process")
    assert Workspace.objects.get(name="whole").action_count == 2


def test_a_whole_recording_reads_and_versions_the_keys_earlier_recordings_wrote(setup):
    """The batch reads every key it names in one query up front: what it finds there must be what each
    key's own look-up would have found (the latest version to read, the next version to write)."""
    ws, client = setup("whole-again")
    for answer in ("30 days", "60 days"):
        done = post(client, "batch/", {"actions": [
            {"agent": "http_faq_writer", "payload": {"topic": "returns"}, "parent": None, "calls": [
                {"op": "get", "key": "faq/returns"}, {"op": "get", "key": "faq/never-written"},
                {"op": "set", "key": "faq/returns", "value": answer},
                {"op": "finish", "decision": {"topic": "returns"}}]}]}, 201)
    assert done["results"][0][0] == {"key": "faq/returns", "value": "30 days", "found": True}
    assert done["results"][0][1]["found"] is False
    versions = workspace_graph(ws.name).ro_query(
        "MATCH (f:Fact {key: 'faq/returns'}) RETURN f.version, f.value ORDER BY f.version")
    assert [(v, json.loads(value)) for v, value in versions] == [(1, "30 days"), (2, "60 days")]


def test_a_failing_call_in_a_whole_recording_is_named_and_nothing_lands(setup):
    ws, client = setup("whole-bad")
    refund = {"op": "effect", "kind": "refund", "amount": 500, "ticket": "t1", "external": True,
              "idempotency_key": "r1"}
    bad = [{"op": "get", "key": "faq/returns"}, {"op": "effect", "kind": "refund", "amount": -5,
                                                 "idempotency_key": "r2"},
           {"op": "finish", "decision": {"ok": True}}]
    error = post(client, "batch/", {"actions": [
        {"agent": "http_faq_writer", "payload": {"topic": "returns"}, "parent": None, "calls": [refund] + WRITER},
        {"agent": "http_faq_reader", "parent": 0, "calls": bad}]}, 400)["error"]
    assert error["details"]["action"] == 1 and error["details"]["call"] == 1 and error["details"]["op"] == "effect"
    assert "action 1" in error["message"] and "call 1 (effect)" in error["message"]
    _nothing_in_the_graph(ws)
    assert not Recording.objects.exists() and not LedgerEntry.objects.exists()
    assert Workspace.objects.get(pk=ws.pk).action_count == 0

    # Out of depth-first order (a second root while a handoff waits), a handoff never recorded, a
    # missing finish, a float in a decision: each refused the same way.
    for actions, where in [
        ([{"agent": "http_faq_writer", "payload": {}, "calls": WRITER},
          {"agent": "http_faq_writer", "payload": {}, "calls": WRITER[2:]}], 1),
        ([{"agent": "http_faq_writer", "payload": {}, "calls": WRITER}], 1),
        ([{"agent": "http_faq_writer", "payload": {}, "calls": WRITER[:1]}], 0),
        ([{"agent": "http_faq_writer", "payload": {}, "calls": [{"op": "finish", "decision": {"x": 0.5}}]}], 0),
    ]:
        response = client.post("/api/v1/recording/batch/", {"actions": actions}, format="json")
        assert response.status_code in (400, 409), response.content
        assert response.json()["error"]["details"]["action"] == where, response.content
    _nothing_in_the_graph(ws)
    assert not Recording.objects.exists()


def test_a_failing_call_in_a_batch_of_one_action_is_named_and_nothing_of_the_batch_lands(setup):
    ws, client = setup("calls-bad")
    a = post(client, "actions/", {"agent": "http_faq_writer", "payload": {"topic": "returns"}}, 201)["action"]
    before = Recording.objects.get().state
    error = post(client, f"actions/{a}/calls/", {"calls": [
        {"op": "set", "key": "faq/returns", "value": "30 days"},
        {"op": "handoff", "agent": "nobody", "payload": {}}, {"op": "finish", "decision": {}}]}, 404)["error"]
    assert error["details"]["call"] == 1 and error["details"]["op"] == "handoff" and "call 1" in error["message"]
    assert Recording.objects.get().state == before
    for calls in ([], [{"op": "finish", "decision": {}}, {"op": "get", "key": "k"}], [{"op": "teleport"}], "x"):
        response = client.post(f"/api/v1/recording/actions/{a}/calls/", {"calls": calls}, format="json")
        assert response.status_code == 400, response.content
    assert Recording.objects.get().state == before
    # The single calls still work after the refused batch, from where the recording stood.
    results = post(client, f"actions/{a}/calls/", {"calls": WRITER})["results"]
    assert results[0] == {"key": "faq/returns", "written": True}
    _nothing_in_the_graph(ws)


def test_the_batch_forms_are_typed_in_the_openapi_schema(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    for name in ("RecordingCallsRequest", "RecordingCallRequest", "RecordingCallResults", "RecordingBatchRequest",
                 "RecordingBatchActionRequest", "RecordingBatchCommitted", "IngestCallRequest", "IngestAnswer"):
        assert name in components, name
    assert components["RecordingCallRequest"]["discriminator"]["propertyName"] == "op"
    calls = schema["paths"]["/api/v1/recording/actions/{action_id}/calls/"]["post"]
    assert calls["operationId"] == "recording_calls"
    assert "/api/v1/recording/batch/" in schema["paths"]
