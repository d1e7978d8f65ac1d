"""MCP tools for MCP-native agents: the recording protocol (open an action, get / set memory, ingest a
source, hand off, record an effect, finish) with a recording token, and fact history with `as_of`.

The tools call the same services as the REST protocol (provenance.recording.remote), so a recording made over
MCP is staged, committed and repaired exactly like one made over HTTP. A recording token (`kag_…`) is
accepted by the endpoint's token verifier beside people's DRF tokens; these tools take only the
former, fact_history takes either (a person sees the workspaces they are a member of).
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from kintsugi_site.api.errors import map_domain_error
from provenance.recording import batch, remote, selectors
from provenance.access import tenancy, tokens
from provenance import validation
from provenance.models import AgentToken

log = logging.getLogger("kintsugi.mcp")
AGENT_SUBJECT = "agent-token:"  # an AccessToken's subject for a recording token (a person's is their pk)


def agent_token_for(key: str) -> AgentToken | None:
    from provenance.access.onboarding import token_for_key

    close_old_connections()
    try:
        return token_for_key(key)
    finally:
        close_old_connections()


def _recording_token(access) -> AgentToken:
    if access is None or not str(access.subject or "").startswith(AGENT_SUBJECT):
        raise PermissionError("the memory tools need a recording token (issued by the workspace's admin)")
    token = (AgentToken.objects.select_related("workspace")
             .filter(pk=int(access.subject[len(AGENT_SUBJECT):]), revoked_at__isnull=True).first())
    if token is None or tokens.expired(token.expires_at):
        raise PermissionError("the recording token was revoked or has expired")
    return token


def _run(access, fn, kwargs: dict) -> dict[str, Any]:
    close_old_connections()
    try:
        validation.refuse_nul(kwargs, where="an argument")  # as the API's parser: a NUL anywhere is a 400
        return fn(access, **kwargs)
    except Exception as exc:
        mapped = map_domain_error(exc)
        if mapped is None:
            log.exception("MCP memory tool %s failed", getattr(fn, "__name__", fn))
            raise ToolError("internal error; it has been logged") from None
        raise ToolError(mapped[2]) from None
    finally:
        close_old_connections()


async def _call(fn, **kwargs) -> dict[str, Any]:
    access = get_access_token()
    return await sync_to_async(_run, thread_sensitive=False)(access, fn, kwargs)


def _op(access, *, action: int, op: str, body: dict) -> dict:
    return remote.call(token=_recording_token(access), action_id=action, op=op, body=body)


def _open(access, *, agent: str, payload: dict | None, parent: int | None) -> dict:
    return remote.open_action(token=_recording_token(access), agent=agent, payload=payload, parent=parent)


def _finish(access, *, action: int, decision: dict) -> dict:
    return remote.finish_action(token=_recording_token(access), action_id=action, body={"decision": decision})


def _calls(access, *, action: int, calls: list) -> dict:
    return batch.calls(token=_recording_token(access), action_id=action, calls=calls)


def _batch(access, *, actions: list) -> dict:
    return batch.record(token=_recording_token(access), actions=actions)


def _fact_history(access, *, workspace: str, key: str, as_of: str | None, clock: str) -> dict:
    subject = str(getattr(access, "subject", "") or "")
    if subject.startswith(AGENT_SUBJECT):
        ws = _recording_token(access).workspace
        if ws.name != workspace:
            raise LookupError(f"unknown workspace {workspace!r}")
    else:
        from kintsugi_site.mcp_server import _user, _workspace

        user = _user(access)
        ws = _workspace(user, workspace, capability="read_sources")
    validation.fact_key(key)
    if clock not in ("known", "valid"):
        raise ValueError("clock must be known or valid")
    versions = selectors.fact_history(workspace=ws.name, key=key)
    if not versions:
        raise LookupError(f"no fact {key!r} in workspace {ws.name!r}")
    held = None
    if as_of:
        try:
            at = datetime.fromisoformat(as_of)
        except ValueError:
            raise ValueError("as_of must be an ISO 8601 time") from None
        held = selectors.fact_as_of(workspace=ws.name, key=key, at=at, clock=clock)
    return {"workspace": ws.name, "key": key, "clock": clock, "as_of": as_of, "value_as_of": held,
            "versions": versions}


def register_memory_tools(server) -> None:
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(name="open_action", annotations=writes)
    async def open_action(agent: str, payload: dict | None = None, parent: int | None = None) -> dict[str, Any]:
        """Open an action of `agent`: a root with its `payload`, or (with `parent`) the next handoff of a
        finished action. Returns the action id every other memory tool takes. Nothing reaches the graph
        until the recording's last action is finished."""
        return await _call(_open, agent=agent, payload=payload, parent=parent)

    @server.tool(name="memory_get", annotations=writes)
    async def memory_get(action: int, key: str, default: Any = None) -> dict[str, Any]:
        """Read fact `key` as this action sees it: the latest active version written before it."""
        return await _call(_op, action=action, op="get", body={"key": key, "default": default})

    @server.tool(name="memory_set", annotations=writes)
    async def memory_set(action: int, key: str, value: Any, valid_from: str | None = None,
                         valid_until: str | None = None, observed_at: str | None = None) -> dict[str, Any]:
        """Write a new version of fact `key` (valid_from / valid_until: when true in the world;
        observed_at: when it was known, for back-filled material)."""
        body = {"key": key, "value": value, **{k: v for k, v in (("valid_from", valid_from),
                ("valid_until", valid_until), ("observed_at", observed_at)) if v is not None}}
        return await _call(_op, action=action, op="set", body=body)

    @server.tool(name="ingest_source", annotations=writes)
    async def ingest_source(action: int, source: str) -> dict[str, Any]:
        """Read a source's content (content is null when the source is masked by a repair)."""
        return await _call(_op, action=action, op="ingest", body={"source": source})

    @server.tool(name="handoff", annotations=writes)
    async def handoff(action: int, agent: str, payload: dict) -> dict[str, Any]:
        """Hand work to `agent`; open it with open_action(parent=action) once this action is finished."""
        return await _call(_op, action=action, op="handoff", body={"agent": agent, "payload": payload})

    @server.tool(name="record_effect", annotations=writes)
    async def record_effect(action: int, kind: str, idempotency_key: str, amount: int = 0, ticket: str | None = None,
                            currency: str = "USD", details: dict | None = None, external: bool = False) -> dict[str, Any]:
        """Record an external effect (integer cents) before it leaves. Perform it only if the answer's
        `perform` is true; the same idempotency_key again is the same effect. `ticket` must be one of the
        workspace's tickets unless `external` says it is not a desk ticket."""
        body = {"kind": kind, "idempotency_key": idempotency_key, "amount": amount, "currency": currency,
                "details": details or {}, **({"ticket": ticket} if ticket is not None else {}),
                **({"external": True} if external else {})}
        return await _call(_op, action=action, op="effect", body=body)

    @server.tool(name="finish_action", annotations=writes)
    async def finish_action(action: int, decision: dict) -> dict[str, Any]:
        """Finish the action with its structured decision (no floats). `next` names the handoff to open
        next; `committed` is true once the whole recording is in the graph."""
        return await _call(_finish, action=action, decision=decision)

    @server.tool(name="record_calls", annotations=writes)
    async def record_calls(action: int, calls: list[dict[str, Any]]) -> dict[str, Any]:
        """Several calls of one open action in one request, in order: each is {"op": "ingest" | "get" |
        "set" | "handoff" | "effect" | "finish", ...the single tool's fields} (effect: idempotency_key;
        finish: decision, and last). Answers {"results": [...]}, one per call, each what the single call
        answers. A failing call is named by its position and nothing of the batch is recorded."""
        return await _call(_calls, action=action, calls=calls)

    @server.tool(name="record_batch", annotations=writes)
    async def record_batch(actions: list[dict[str, Any]]) -> dict[str, Any]:
        """A whole finished recording in one request: actions [{"agent", "payload", "parent": index of
        the action that handed off to it or null, "calls": [...]}] in depth-first order (each handoff
        after its parent, the last handoff first), every action ending with finish. Answers
        {"committed": true, "actions": [ids], "results"}; an error names the action and call, and
        nothing is recorded."""
        return await _call(_batch, actions=actions)

    @server.tool(name="fact_history", annotations=reads)
    async def fact_history(workspace: str, key: str, as_of: str | None = None, clock: str = "known") -> dict[str, Any]:
        """Every version of fact `key` with its three clocks and invalidation; with `as_of` (ISO 8601),
        also the value held then (clock known: what the system believed; valid: what held in the world)."""
        return await _call(_fact_history, workspace=workspace, key=key, as_of=as_of, clock=clock)
