"""A NUL anywhere in a request answers 400 in the error shape of its door, never 500, with nothing
written: a fact key of a batch (REST and MCP), the case desk's filters and the item list's, any query
string, any JSON body, any MCP tool argument. The red cases answered 500 (Postgres or the graph refused the
NUL after no check had looked for it)."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError

from kintsugi_site import mcp_memory, mcp_server
from provenance.recording import batch
from provenance import validation
from provenance.models import Recording, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from tests.helpers import client_for, row_counts

pytestmark = pytest.mark.django_db


@pytest.fixture
def recording_token():
    ws = Workspace.objects.create(name="nul-desk")
    register_agent(workspace=ws, name="far_agent", replay="http://127.0.0.1:9/replay", actor=None, reason="r",
                   via="cli")
    token, key = issue_agent_token(workspace=ws, label="t", actor=None, reason="r", via="cli")
    return token, key


@pytest.fixture
def in_this_transaction(monkeypatch):
    """The MCP tools' plumbing as the endpoint runs it, on the test's own connection: it closes stale
    connections around each call, which would close the test's transaction."""
    for module in (mcp_memory, mcp_server):
        monkeypatch.setattr(module, "close_old_connections", lambda: None)


def _whole_recording(call: dict) -> dict:
    return {"actions": [{"agent": "far_agent", "payload": {}, "calls": [call, {"op": "finish", "decision": {}}]}]}


BAD_CALLS = [{"op": "get", "key": "vip\x00rules"}, {"op": "set", "key": "vip\x00rules", "value": 1}]


@pytest.mark.parametrize("call", BAD_CALLS)
def test_a_nul_in_a_batch_fact_key_is_400_over_rest_naming_the_call(recording_token, call):
    _, key = recording_token
    before = row_counts()
    answer = Client().post("/api/v1/recording/batch/", json.dumps(_whole_recording(call)),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert answer.status_code == 400, answer.content
    assert set(answer.json()["error"]) == {"code", "message", "details"}
    assert row_counts() == before and not Recording.objects.exists()


@pytest.mark.parametrize("call", BAD_CALLS)
def test_a_nul_in_a_batch_fact_key_is_refused_by_the_batch_itself(recording_token, call):
    """Behind every door: the batch refuses the key in its own call instead of sending it to the graph."""
    token, _ = recording_token
    with pytest.raises(batch.BatchCallFailed) as refused:
        batch.record(token=token, actions=_whole_recording(call)["actions"])
    assert refused.value.status == 400 and refused.value.call == 0 and "control character" in str(refused.value)


@pytest.mark.parametrize("call", BAD_CALLS)
def test_a_nul_in_a_batch_fact_key_is_a_tool_error_over_mcp(recording_token, in_this_transaction, call):
    token, key = recording_token
    access = AccessToken(token=key, client_id="t", scopes=[], subject=f"{mcp_memory.AGENT_SUBJECT}{token.pk}")
    before = row_counts()
    with pytest.raises(ToolError, match="NUL"):
        mcp_memory._run(access, mcp_memory._batch, _whole_recording(call))
    with pytest.raises(ToolError, match="NUL"):
        mcp_memory._run(access, mcp_memory._fact_history,
                        {"workspace": "nul-desk", "key": "vip\x00rules", "as_of": None, "clock": "valid"})
    assert row_counts() == before


def test_a_nul_in_any_tool_argument_is_refused_before_the_tool_runs(repaired, in_this_transaction):
    user = repaired.people.reviewer
    access = AccessToken(token="x", client_id=user.username, scopes=[], subject=str(user.pk))
    item = repaired.incident.compensation_items.filter(status="pending").first()
    before = row_counts()
    with pytest.raises(ToolError, match="NUL"):
        mcp_server._run(access, mcp_server.reject_item, {"item": item.pk, "reason": "no\x00"})
    assert row_counts() == before


@pytest.mark.parametrize("path", [
    "/admin/compensation/compensationitem/cases/?q=%00", "/admin/compensation/compensationitem/cases/?assignee=%00",
    "/admin/compensation/compensationitem/cases/?q=a&ticket=t%00", "/admin/compensation/compensationitem/?ticket_id=%00",
    "/admin/compensation/compensationitem/?ticket_id__exact=%00", "/admin/repairs/incident/?q%00=x",
])
def test_a_nul_in_an_admin_filter_is_400(client, repaired, path):
    client.force_login(repaired.people.reviewer)
    answer = client.get(path)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid", answer.content[:200]


@pytest.mark.parametrize("path", ["/api/v1/incidents/?x%00=1", "/api/v1/review-items/?ordering=%00",
                                  "/api/v1/review-items/?page=%00", "/healthz?%00"])
def test_a_nul_in_any_query_string_is_400(repaired, path):
    repaired.incident.workspace.members.add(repaired.people.lead)
    from rest_framework.authtoken.models import Token

    Token.objects.get_or_create(user=repaired.people.lead)
    answer = client_for(repaired.people.lead).get(path)
    assert answer.status_code == 400 and "NUL" in answer.json()["error"]["message"]


def test_a_nul_anywhere_in_a_json_body_is_400(recording_token):
    _, key = recording_token
    before = row_counts()
    for body in ({"agent": "far_agent", "payload": {"notes": [{"deep": "a\x00b"}]}},
                 {"agent": "far_agent", "payload": {}, "extra\x00": 1}):
        answer = Client().post("/api/v1/recording/actions/", json.dumps(body), content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {key}")
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "parse_error", answer.content
    assert row_counts() == before
    # The text "\u0000" (a backslash and five characters) is no NUL, and passes.
    answer = Client().post("/api/v1/recording/actions/", json.dumps({"agent": "far_agent", "payload": {"t": "\\u0000"}}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert answer.status_code == 201, answer.content


def test_holds_nul_walks_keys_values_and_depth():
    assert validation.holds_nul({"a": [1, {"b": ("c", "d\x00")}]}) and validation.holds_nul({"k\x00": 1})
    assert not validation.holds_nul({"a": [1, {"b": ("c", "d")}], "n": None})
