"""OpenTelemetry GenAI traces in: spans the real OpenTelemetry SDK exports over OTLP/HTTP (protobuf and
JSON) land as recordings whose blast radius is the radius of the same desk recorded through the
protocol; bad exports are refused with nothing recorded."""
from __future__ import annotations

import base64
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
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
from repairs.services import incident_summary
from kintsugi_site.mcp_server import incident_status as mcp_incident_status
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


def test_a_repair_over_traced_actions_takes_them_out_for_review_and_says_they_were_not_re_run(traced):
    """The traced agents have no replay endpoint (nothing listens at their registration's URL): the repair
    re-runs none of them, takes each one out, drafts its effects for review and says so wherever it is read."""
    ws, client = traced
    assert client.post(TRACES, _export(_finished_spans()), content_type="application/x-protobuf").status_code == 200
    incident = run_repair(incident_id=open_incident(ws.name, "partner/vip").pk)
    assert incident.status == Incident.Status.REPAIRED, incident.error
    reason = incident.transitions.order_by("-at", "-pk").values_list("reason", flat=True).first()
    assert reason.startswith("repaired with review: 4 action(s) recorded from OpenTelemetry traces were not re-run")
    # Nothing re-run: the scout that ingested the source is masked, the triage and payouts it fed superseded.
    assert incident.counts | {} == {"poisoned": 1, "rerun_changed": 0, "rerun_same": 0, "skipped": 0,
                                    "superseded": 3, "new": 0}
    v = incident.verification
    assert (v["facts"], v["decisions"], v["effects"], v["replay_calls"]) == (0, 0, 0, 0)
    # The poisoned fact is invalidated: a live read finds no vip_rules; the clean one stays.
    graph = workspace_graph(ws.name)
    live = dict(graph.ro_query("MATCH (f:Fact) WHERE f.invalidated_by IS NULL RETURN f.key, count(f)"))
    assert "vip_rules" not in live and live.get("refund_policy") == 1, live
    # The refund the traced payouts agent made is invalidated and becomes a review item marked not re-run.
    refund = incident.effects.get(kind="refund")
    assert refund.role == "invalidated" and refund.amount_cents == 2500
    said = incident_summary(incident)["not_rerun"]
    assert said["actions"] == 4 and said["agents"] == ["desk_triage", "payouts", "scout"]
    assert said["effects"] == 1 and said["items"] == len(said["item_ids"]) >= 1
    assert set(said["item_ids"]) == set(refund.compensation_items.values_list("pk", flat=True))
    assert "were not re-run" in said["text"] and "review item marked not re-run" in said["text"]
    admin = get_user_model().objects.get(username="root")
    api = APIClient()
    api.force_authenticate(admin)
    body = api.get(f"/api/v1/incidents/{incident.pk}/").json()
    assert body["not_rerun"] == said and body["status"] == "repaired"
    assert mcp_incident_status(user=admin, incident=incident.pk)["not_rerun"] == said
    assert api.get(f"/api/v1/review-items/{said['item_ids'][0]}/").json()["not_rerun"] is True
    admin.is_staff = True
    admin.save(update_fields=["is_staff"])
    page = Client()
    page.force_login(admin)
    html = page.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode()
    assert 'id="not-rerun"' in html and "with review" in html
    item = page.get(reverse("admin:compensation_compensationitem_change", args=[said["item_ids"][0]])).content.decode()
    assert 'id="item-not-rerun"' in item


def test_flag_source_json_says_which_traced_actions_were_not_re_run(traced):
    ws, client = traced
    assert client.post(TRACES, _export(_finished_spans()), content_type="application/x-protobuf").status_code == 200
    out = io.StringIO()
    call_command("flag_source", source="partner/vip", workspace=ws.name, reason="poisoned partner page", user="root",
                 json=True, stdout=out)
    flagged = json.loads(out.getvalue())
    assert flagged["status"] == "open" and flagged["not_rerun"] is None  # nothing walked yet
    run_repair(incident_id=flagged["incident"])  # what the worker does; --wait prints the same shape after it
    said = incident_summary(Incident.objects.get(pk=flagged["incident"]))
    assert said["status"] == "repaired" and said["not_rerun"]["actions"] == 4, said


def test_a_desk_without_traced_actions_says_nothing_of_not_re_run(traced):
    ws, client = traced
    recorded, key = _workspace("recorded")
    _protocol_desk(key)
    local = APIClient()
    local.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    incident = open_incident(recorded.name, "partner/vip")
    with pytest.raises((ReplayUnavailable, ReplayFailed)):  # recorded, not traced: it must be re-run
        run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    assert incident.status != Incident.Status.REPAIRED and incident_summary(incident)["not_rerun"] is None
    assert "recorded from an OpenTelemetry trace" not in incident.error
