"""OpenTelemetry GenAI traces in: spans the real OpenTelemetry SDK exports over OTLP/HTTP (protobuf and
JSON) land as recordings whose blast radius is the radius of the same desk recorded through the
protocol; bad exports are refused with nothing recorded."""
from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth import get_user_model
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rest_framework.test import APIClient

from provenance.graph import queries

from provenance.recording import selectors
from provenance.graph.graph import workspace_graph
from provenance.models import Recording, Source, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.replay import ReplayFailed, ReplayUnavailable
from repairs.job import run_repair
from repairs.models import Incident
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)
AGENTS = ("scout", "desk_triage", "payouts")
TRACES = "/api/v1/otlp/v1/traces"
# ticket -> (reads vip_rules, hands off to refunds)
TICKETS = {"t1": (True, True), "t2": (True, False), "t3": (False, True)}


def _workspace(name: str) -> tuple[Workspace, str]:
    admin, _ = get_user_model().objects.get_or_create(username="root", defaults={"is_superuser": True})
    ws = Workspace.objects.create(name=name)
    Source.objects.create(workspace=ws, source_id="partner/vip", content="VIPs get a full refund")
    Source.objects.create(workspace=ws, source_id="kb/returns", content="30 days")
    for agent in AGENTS:
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="t",
                       via="cli")
    _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    return ws, key


def _traced_desk(provider: TracerProvider) -> None:
    """The desk as an instrumented agent stack traces it, with the GenAI conventions' names only."""
    tracer = provider.get_tracer("support-desk")

    def span(name, **attrs):
        return tracer.start_as_current_span(name, attributes=attrs)

    for source, key, content in (("partner/vip", "vip_rules", "full refund"), ("kb/returns", "refund_policy", "30")):
        with span("invoke_agent scout", **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "scout"}):
            with span("retrieval", **{"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": source}):
                pass
            with span("update_memory", **{"gen_ai.operation.name": "update_memory", "gen_ai.memory.id": key,
                                          "gen_ai.memory.content": content}):
                pass
    for ticket, (vip, refund) in TICKETS.items():
        with span("invoke_agent triage", **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "desk_triage",
                                            "gen_ai.conversation.id": ticket}):
            keys = ["refund_policy", "vip_rules"] if vip else ["refund_policy"]
            with span("search_memory", **{"gen_ai.operation.name": "search_memory", "gen_ai.memory.id": keys}):
                pass
            with span("chat", **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}):
                pass  # a model call: not memory, not an effect
            if refund:
                with span("invoke_agent refunds", **{"gen_ai.operation.name": "invoke_agent",
                                                     "gen_ai.agent.name": "payouts", "gen_ai.conversation.id": ticket}):
                    with span("execute_tool lookup_order", **{"gen_ai.operation.name": "execute_tool",
                                                              "gen_ai.tool.name": "lookup_order"}):
                        pass  # a tool that is no effect kind
                    with span("execute_tool refund", **{
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund",
                            "gen_ai.tool.call.arguments": json.dumps({"amount": 2500, "ticket": ticket,
                                                                      "external": True})}):
                        pass


def _protocol_desk(key: str) -> None:
    """The same desk recorded through the recording protocol's batch form."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    actions = [{"agent": "scout", "payload": {}, "parent": None, "calls": [
        {"op": "ingest", "source": source}, {"op": "set", "key": key, "value": value},
        {"op": "finish", "decision": {}}]} for source, key, value in (("partner/vip", "vip_rules", "full refund"),
                                                                     ("kb/returns", "refund_policy", "30"))]
    for ticket, (vip, refund) in TICKETS.items():
        calls = [{"op": "get", "key": k} for k in (["refund_policy", "vip_rules"] if vip else ["refund_policy"])]
        if refund:
            calls.append({"op": "handoff", "agent": "payouts", "payload": {"ticket": ticket}})
        actions.append({"agent": "desk_triage", "payload": {"ticket": ticket}, "parent": None,
                        "calls": calls + [{"op": "finish", "decision": {}}]})
        if refund:
            actions.append({"agent": "payouts", "parent": len(actions) - 1, "calls": [
                {"op": "effect", "kind": "refund", "amount": 2500, "ticket": ticket, "external": True,
                 "idempotency_key": f"r-{ticket}"}, {"op": "finish", "decision": {}}]})
    response = client.post("/api/v1/recording/batch/", {"actions": actions}, format="json")
    assert response.status_code == 201, response.content


def _radius(ws: Workspace) -> dict:
    found = selectors.blast_radius(workspace=ws, source="partner/vip")
    found["actions"] = [(a["agent"], a["ticket"], a["seq"]) for a in found["actions"]]
    return found


def _action_count(ws: Workspace) -> int:
    return workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0]


def test_a_desk_traced_by_the_sdk_has_the_blast_radius_of_the_same_desk_recorded(live_server):
    recorded, key = _workspace("recorded")
    _protocol_desk(key)
    traced, key = _workspace("traced")
    provider = TracerProvider(resource=Resource.create({"service.name": "desk"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"{live_server.url}{TRACES}", headers={"Authorization": f"Bearer {key}"})))
    _traced_desk(provider)
    assert provider.force_flush(30_000)
    provider.shutdown()
    assert _action_count(traced) == _action_count(recorded) == 7
    radius = _radius(traced)
    assert radius == _radius(recorded)
    assert [a[:2] for a in radius["actions"]] == [("scout", None), ("desk_triage", "t1"), ("payouts", "t1"),
                                                  ("desk_triage", "t2")]
    assert radius["effects"] == 1 and radius["amount_at_stake"] == 25.0
    assert Recording.objects.get(workspace=traced).state["traced"] is True
    assert "traced" not in Recording.objects.get(workspace=recorded).state


def _export(provider_spans) -> bytes:
    return encode_spans(provider_spans).SerializeToString()


def _finished_spans() -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _traced_desk(provider)
    return list(memory.get_finished_spans())


def _otlp_json(raw_spans) -> dict:
    """OTLP/JSON as the specification writes it: ids in hex, not protobuf JSON's base64."""
    body = json_format.MessageToDict(encode_spans(raw_spans))
    for rs in body["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in s:
                        s[name] = base64.b64decode(s[name]).hex()
    return body


@pytest.fixture
def traced():
    ws, key = _workspace("traced")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return ws, client


def test_otlp_json_lands_as_the_protobuf_export_does(traced):
    ws, client = traced
    response = client.post(TRACES, json.dumps(_otlp_json(_finished_spans())), content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json() == {}
    assert _action_count(ws) == 7
    assert [a[:2] for a in _radius(ws)["actions"]][-1] == ("desk_triage", "t2")


def test_bad_exports_are_refused_and_record_nothing(traced, settings):
    ws, client = traced
    garbage = client.post(TRACES, b"\xff\xff\xff not protobuf", content_type="application/x-protobuf")
    assert garbage.status_code == 400, garbage.content
    body = _otlp_json(_finished_spans())
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "not-hex"
    assert client.post(TRACES, json.dumps(body), content_type="application/json").status_code == 400
    body = _otlp_json(_finished_spans())
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
        {"key": "gen_ai.memory.content", "value": {"stringValue": "a\u0000b"}})
    assert client.post(TRACES, json.dumps(body), content_type="application/json").status_code == 400
    spans = _finished_spans()
    raw = _export(spans)
    nul = raw.replace(b"full refund", b"full\x00refund")
    assert nul != raw
    assert client.post(TRACES, nul, content_type="application/x-protobuf").status_code == 400
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = len(raw) - 1
    assert client.post(TRACES, raw, content_type="application/x-protobuf").status_code == 413
    anonymous = APIClient().post(TRACES, raw, content_type="application/x-protobuf")
    assert anonymous.status_code == 401
    assert _action_count(ws) == 0 and not Recording.objects.filter(workspace=ws).exists()


def test_an_effect_kind_tool_with_bad_arguments_names_the_call_and_records_nothing(traced):
    ws, client = traced
    body = _otlp_json(_finished_spans())
    for s in body["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for a in s["attributes"]:
            if a["key"] == "gen_ai.tool.call.arguments":
                a["value"]["stringValue"] = json.dumps({"amount": "lots", "ticket": "t1", "external": True})
    response = client.post(TRACES, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["op"] == "effect"
    assert _action_count(ws) == 0


def test_a_repair_that_must_re_run_a_traced_action_says_so_and_changes_nothing(traced):
    ws, client = traced
    assert client.post(TRACES, json.dumps(_otlp_json(_finished_spans())),
                       content_type="application/json").status_code == 200
    before = _radius(ws)
    incident = open_incident(ws.name, "partner/vip")
    with pytest.raises((ReplayUnavailable, ReplayFailed)):
        run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    assert incident.status != Incident.Status.REPAIRED
    assert "recorded from an OpenTelemetry trace" in incident.error, incident.error
    assert "nothing was re-run or changed" in incident.error
    assert _radius(ws) == before
