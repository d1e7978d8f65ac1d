"""OpenTelemetry GenAI traces in: an OTLP/HTTP trace export (protobuf or JSON, the official
opentelemetry-proto messages) turned into whole finished recordings, recorded through
provenance.recording.batch exactly as the recording protocol's batch form records them.

The mapping (docs/otel.md): an `invoke_agent` span is an action of `gen_ai.agent.name`; an
`invoke_agent` span below another one is a handoff from it. Inside an action, in start order:
`gen_ai.data_source.id` is an ingest of that source, `retrieval` / `search_memory` read the
`gen_ai.memory.id` keys, `create_memory` / `update_memory` / `upsert_memory` write
`gen_ai.memory.content` under `gen_ai.memory.id` (`delete_memory` writes null), and `execute_tool` of a
tool whose name is an effect kind (built in or declared by the workspace) records an effect from the
call's arguments. Other spans are not agent work and are left out.
"""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from provenance.recording import batch

from provenance import validation
from provenance.access.effect_declarations import BUILT_IN, declarations
from provenance.models import AgentToken
from provenance.recording.protocol import InvalidCall

OP = "gen_ai.operation.name"
READS = ("retrieval", "search_memory")
WRITES = ("create_memory", "update_memory", "upsert_memory", "delete_memory")
# Fields an effect takes from the tool call's arguments; the rest are the effect's details.
EFFECT_FIELDS = ("amount", "ticket", "currency", "external")
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class MalformedTrace(InvalidCall):
    """An export that is not an OTLP trace export, or whose GenAI spans cannot be recorded."""


@dataclass
class Span:
    span_id: bytes
    parent: bytes
    name: str
    start: int
    attrs: dict
    children: list = field(default_factory=list)

    @property
    def op(self) -> str:
        return self.attrs.get(OP) or ""


# --- decoding -------------------------------------------------------------------------------------------
def decode(raw: bytes, *, json_body: dict | None = None) -> ExportTraceServiceRequest:
    """The export: protobuf bytes, or (json_body) the JSON encoding already parsed by the API's parser,
    whose trace and span ids are hex, as OTLP/JSON writes them, not the base64 of protobuf's JSON."""
    message = ExportTraceServiceRequest()
    if json_body is None:
        try:
            message.ParseFromString(raw)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise MalformedTrace(f"not an OTLP trace export in protobuf: {exc}") from None
        return message
    if not isinstance(json_body, dict):
        raise MalformedTrace("an OTLP/JSON trace export is a JSON object")
    try:
        json_format.ParseDict(_hex_ids_to_base64(json_body), message, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedTrace(f"not an OTLP trace export in JSON: {exc}") from None
    return message


def _hex_ids_to_base64(body: dict) -> dict:
    body = json.loads(json.dumps(body))  # a copy to rewrite
    for rs in _list(body.get("resourceSpans")):
        for ss in _list(rs.get("scopeSpans") if isinstance(rs, dict) else None):
            for span in _list(ss.get("spans") if isinstance(ss, dict) else None):
                if not isinstance(span, dict):
                    continue
                for name in _ID_FIELDS:
                    if isinstance(span.get(name), str):
                        try:
                            span[name] = base64.b64encode(bytes.fromhex(span[name])).decode()
                        except ValueError:
                            raise MalformedTrace(f"{name} is not hex") from None
    return body


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return binascii.hexlify(v.bytes_value).decode()
    return getattr(v, kind) if kind else None


def spans(message: ExportTraceServiceRequest) -> list[Span]:
    out = []
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                attrs = {kv.key: _value(kv.value) for kv in s.attributes}
                if validation.holds_nul([s.name, attrs]):
                    raise MalformedTrace("a span's name or attribute holds a NUL character")
                out.append(Span(bytes(s.span_id), bytes(s.parent_span_id), s.name, s.start_time_unix_nano, attrs))
    return out


# --- mapping --------------------------------------------------------------------------------------------
def _json_attr(span: Span, name: str):
    raw = span.attrs.get(name)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise MalformedTrace(f"{name} of span {span.name!r} is a JSON string")
    try:
        return json.loads(raw)
    except ValueError:
        raise MalformedTrace(f"{name} of span {span.name!r} is not JSON") from None


def payload(span: Span) -> dict:
    """An action's input: `kintsugi.payload` (a JSON object) when the agent gives one, else the
    conversation as the ticket (a support conversation is a ticket)."""
    given = _json_attr(span, "kintsugi.payload")
    if given is not None:
        return given
    conversation = span.attrs.get("gen_ai.conversation.id")
    return {"ticket": conversation} if conversation is not None else {}


def _keys(span: Span) -> list:
    keys = span.attrs.get("gen_ai.memory.id")
    return keys if isinstance(keys, list) else [] if keys is None else [keys]


def _calls(agent: Span, work: list[Span], effect_kinds: set[str]) -> list[dict]:
    calls = []
    if agent.attrs.get("gen_ai.data_source.id") is not None:
        calls.append({"op": "ingest", "source": agent.attrs["gen_ai.data_source.id"]})
    for s in work:
        if s.op == "invoke_agent":
            calls.append({"op": "handoff", "agent": s.attrs.get("gen_ai.agent.name"), "payload": payload(s)})
            continue
        if s.attrs.get("gen_ai.data_source.id") is not None:
            calls.append({"op": "ingest", "source": s.attrs["gen_ai.data_source.id"]})
        if s.op in READS:
            calls.extend({"op": "get", "key": key} for key in _keys(s))
        elif s.op in WRITES:
            keys = _keys(s)
            if len(keys) != 1:
                raise MalformedTrace(f"a {s.op} span names one gen_ai.memory.id")
            value = None if s.op == "delete_memory" else s.attrs.get("gen_ai.memory.content")
            calls.append({"op": "set", "key": keys[0], "value": value})
        elif s.op == "execute_tool" and s.attrs.get("gen_ai.tool.name") in effect_kinds:
            calls.append(_effect(s))
    decision = _json_attr(agent, "kintsugi.decision")
    return calls + [{"op": "finish", "decision": {} if decision is None else decision}]


def _effect(s: Span) -> dict:
    arguments = _json_attr(s, "gen_ai.tool.call.arguments") or {}
    if not isinstance(arguments, dict):
        raise MalformedTrace("gen_ai.tool.call.arguments of an effect is a JSON object")
    call = {"op": "effect", "kind": s.attrs["gen_ai.tool.name"], "idempotency_key": f"otel-{s.span_id.hex()}",
            "details": {k: v for k, v in arguments.items() if k not in EFFECT_FIELDS}}
    return call | {k: arguments[k] for k in EFFECT_FIELDS if k in arguments}


def recording(all_spans: list[Span], *, effect_kinds: set[str]) -> list[dict]:
    """The batch form's `actions`, depth-first as the in-process recorder runs them: each agent span,
    then the agent spans it handed off to, in start order."""
    by_id = {s.span_id: s for s in all_spans}
    roots: list[Span] = []
    for s in sorted(all_spans, key=lambda x: (x.start, x.span_id)):
        owner = by_id.get(s.parent)
        while owner is not None and owner.op != "invoke_agent":
            owner = by_id.get(owner.parent)
        if owner is not None:
            owner.children.append(s)
        elif s.op == "invoke_agent":
            roots.append(s)
    actions: list[dict] = []

    def walk(agent: Span, parent: int | None) -> None:
        if not isinstance(agent.attrs.get("gen_ai.agent.name"), str):
            raise MalformedTrace(f"invoke_agent span {agent.name!r} has no gen_ai.agent.name")
        index = len(actions)
        actions.append({"agent": agent.attrs["gen_ai.agent.name"], "parent": parent,
                        "calls": _calls(agent, agent.children, effect_kinds)}
                       | ({"payload": payload(agent)} if parent is None else {}))
        for child in agent.children:
            if child.op == "invoke_agent":
                walk(child, index)

    for root in roots:
        walk(root, None)
    return actions


def record(*, token: AgentToken, raw: bytes = b"", json_body: dict | None = None) -> dict:
    """Record the export's GenAI spans as whole recordings; {"actions": [ids]} (none: nothing to record)."""
    found = spans(decode(raw, json_body=json_body))
    kinds = set(BUILT_IN) | set(declarations(token.workspace_id))
    actions = recording(found, effect_kinds=kinds)
    if not actions:
        return {"actions": [], "spans": len(found)}
    done = batch.record(token=token, actions=actions, traced=True)
    return {"actions": done["actions"], "spans": len(found)}
