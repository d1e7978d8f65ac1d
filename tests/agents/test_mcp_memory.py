"""The MCP memory tools, driven by the SDK's own client against the production web server: an action
with reads and an effect recorded over MCP appears in the source's blast radius."""
from __future__ import annotations

import pytest

from provenance.models import Source, Ticket, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.selectors import blast_radius
from tests.api.test_mcp import call, serving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def web_mcp(django_db_setup, tmp_path_factory):
    yield from serving("web", tmp_path_factory.mktemp("mcp-memory") / "web.log")


@pytest.fixture
def workspace(transactional_db, django_user_model):
    admin = django_user_model.objects.create_superuser("mcp-root", "r@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="mcp-desk")
    Source.objects.create(workspace=ws, source_id="kb/returns", content="Returns within 30 days: full refund.")
    Ticket.objects.create(workspace=ws, ticket_id="t1", customer_name="Ana", customer_email="ana@example.com",
                          subject="Refund", body="Broken lamp", amount_cents=4500)
    for agent in ("researcher", "refunder"):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="t", via="cli")
    _, key = issue_agent_token(workspace=ws, label="mcp", actor=admin, reason="t", via="cli")
    return ws, key


def ok(result):
    assert not result.is_error, result.content
    return result.structured_content


def test_an_action_recorded_over_mcp_with_reads_and_an_effect_is_in_the_blast_radius(web_mcp, workspace):
    ws, key = workspace
    tools = {t.name for t in call(web_mcp, key).tools}
    assert {"open_action", "memory_get", "memory_set", "ingest_source", "handoff", "record_effect",
            "finish_action", "fact_history"} <= tools

    a = ok(call(web_mcp, key, "open_action", {"agent": "researcher", "payload": {"source": "kb/returns"}}))["action"]
    content = ok(call(web_mcp, key, "ingest_source", {"action": a, "source": "kb/returns"}))["content"]
    ok(call(web_mcp, key, "memory_set", {"action": a, "key": "refund_policy", "value": content,
                                         "valid_from": "2026-01-01T00:00:00+00:00"}))
    assert ok(call(web_mcp, key, "finish_action", {"action": a, "decision": {"keys": ["refund_policy"]}}))["committed"]

    b = ok(call(web_mcp, key, "open_action", {"agent": "refunder", "payload": {"ticket": "t1"}}))["action"]
    read = ok(call(web_mcp, key, "memory_get", {"action": b, "key": "refund_policy"}))
    assert read["found"] and read["value"] == content
    effect = ok(call(web_mcp, key, "record_effect", {"action": b, "kind": "refund", "amount": 4500, "ticket": "t1",
                                                     "idempotency_key": "refund-t1"}))
    assert effect["perform"] is True
    bad = call(web_mcp, key, "finish_action", {"action": b, "decision": {"amount": 45.0}})
    assert bad.is_error and "float" in bad.content[0].text
    assert ok(call(web_mcp, key, "finish_action", {"action": b, "decision": {"refund": 4500}}))["committed"]

    radius = blast_radius(workspace=ws, source="kb/returns", limit=50, offset=0)
    assert [x["id"] for x in radius["actions"]] == [a, b]
    assert radius["amount_at_stake"] == 45

    history = ok(call(web_mcp, key, "fact_history", {"workspace": ws.name, "key": "refund_policy",
                                                     "as_of": "2026-06-01T00:00:00+00:00", "clock": "valid"}))
    assert history["value_as_of"]["value"] == content and len(history["versions"]) == 1
    assert call(web_mcp, key, "fact_history", {"workspace": "elsewhere", "key": "refund_policy"}).is_error


def test_the_batch_tools_record_calls_and_whole_recordings_and_a_flagged_source_is_quarantined(web_mcp,
                                                                                                django_user_model):
    from provenance.models import SourceQuarantine
    from tests.helpers import open_incident

    # A workspace of its own: the server process remembers the graphs it saw, and the previous test's
    # graph of the same name is deleted between tests.
    admin = django_user_model.objects.create_superuser("mcp-batch-root", "b@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="mcp-batch")
    Source.objects.create(workspace=ws, source_id="kb/returns", content="Returns within 30 days: full refund.")
    for agent in ("researcher", "refunder"):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="t", via="cli")
    _, key = issue_agent_token(workspace=ws, label="mcp", actor=admin, reason="t", via="cli")
    assert {"record_calls", "record_batch"} <= {t.name for t in call(web_mcp, key).tools}
    a = ok(call(web_mcp, key, "open_action", {"agent": "researcher", "payload": {}}))["action"]
    results = ok(call(web_mcp, key, "record_calls", {"action": a, "calls": [
        {"op": "ingest", "source": "kb/returns"}, {"op": "set", "key": "refund_policy", "value": "30 days"},
        {"op": "finish", "decision": {"keys": ["refund_policy"]}}]}))["results"]
    assert results[0]["content"].startswith("Returns within 30 days") and results[2]["committed"] is True

    done = ok(call(web_mcp, key, "record_batch", {"actions": [
        {"agent": "refunder", "payload": {"ticket": "t1"}, "parent": None, "calls": [
            {"op": "get", "key": "refund_policy"}, {"op": "finish", "decision": {"refund": 0}}]}]}))
    assert done["committed"] is True and done["results"][0][0]["value"] == "30 days"
    bad = call(web_mcp, key, "record_batch", {"actions": [
        {"agent": "refunder", "payload": {}, "parent": None, "calls": [
            {"op": "get", "key": ""}, {"op": "finish", "decision": {}}]}]})
    assert bad.is_error and "action 0" in bad.content[0].text and "call 0 (get)" in bad.content[0].text

    incident = open_incident(ws.name, "kb/returns")
    b = ok(call(web_mcp, key, "open_action", {"agent": "researcher", "payload": {}}))["action"]
    single = ok(call(web_mcp, key, "ingest_source", {"action": b, "source": "kb/returns"}))
    assert single == {"source": "kb/returns", "content": None, "quarantined": True, "incident": incident.pk}
    batched = ok(call(web_mcp, key, "record_calls", {"action": b, "calls": [
        {"op": "ingest", "source": "kb/returns"}, {"op": "finish", "decision": {"keys": []}}]}))["results"]
    assert batched[0]["quarantined"] is True
    assert SourceQuarantine.objects.get(incident_id=incident.pk).attempts == 2
