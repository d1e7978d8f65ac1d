"""The MCP endpoint: agents ask "what did this source touch?", why an action depends on a source, flag
a source (opening an incident under the same rules as the admin and the API) and follow its repair; and
review the compensation items (list them, approve or reject one) through the same services as the admin
and the API, so the Reviewer role, four-eyes and the audit record are theirs.

Built on the official SDK (`mcp` 2.x `MCPServer`, streamable HTTP), served by `manage.py mcp_serve`.
- Authentication: the caller's DRF API token as a bearer token (`Authorization: Bearer <token>`),
  checked by the SDK's bearer middleware through `DjangoTokenVerifier`; tools act as that user.
- Tenancy: a workspace the user is not a member of is answered exactly like one that does not exist.
- Transport: binds 127.0.0.1 by default; Host and Origin headers are checked on every request (the
  SDK answers 421 for a foreign Host and 403 for a foreign Origin), whatever the bind address.
"""
from __future__ import annotations

import ipaddress
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations

from core.vocabulary import ItemStatus
from provenance.access.refusals import record_refusal
from kintsugi_site.api.errors import REFUSALS_AUDITED, map_domain_error
from kintsugi_site.api.serializers import MAX_BLAST_RADIUS_PAGE
from kintsugi_site.body_limit import BodyLimit
from compensation.drafting import effect_kinds
from compensation.delivery import gates, links, sequencing
from compensation.review import selectors as compensation_selectors
from compensation.delivery import approval, messages as outgoing
from compensation.review import services as compensation_services
from compensation.models import CompensationItem
from provenance.access import capabilities, tenancy, tokens
from provenance.recording import selectors as provenance_selectors
from provenance import validation
from provenance.models import Workspace
from repairs import explain as repair_explain, services as repair_services
from repairs.models import Incident

log = logging.getLogger("kintsugi.mcp")

INSTRUCTIONS = (
    "kintsugi repairs AI-agent work after a poisoned source. Use blast_radius to see what a source touched "
    "(actions in re-execution order, tickets, live effects, money at stake), what_if for the exact outcome of "
    "flagging it before flagging, suspicious_sources for sources worth a look, explain_path to see why one "
    "action depends on a source, flag_source to open an incident (needs the Support lead role and a "
    "reason; the repair runs in the background) and incident_status to follow it. review_items lists the "
    "compensation items people decide; approve_item and reject_item decide one (Reviewer role, never the "
    "flagger of its incident, a reason to reject). Agents record their work with a recording token: "
    "open_action, memory_get, memory_set, ingest_source, handoff, record_effect and finish_action; "
    "fact_history answers what a fact was, with as_of; incident_prov exports an incident's provenance as W3C PROV.")


# --- authentication -----------------------------------------------------------------------------------------
def _user_for_token(key: str):
    """The API token's user (None for an unknown or expired token, or an inactive user), its use recorded."""
    close_old_connections()
    try:
        found = tokens.api_token_user(key)
    except tokens.TokenExpired:
        return None
    finally:
        close_old_connections()
    return found[0] if found else None


class DjangoTokenVerifier:
    """The SDK's TokenVerifier protocol over DRF's token table: the same token works for the REST API."""

    async def verify_token(self, token: str) -> AccessToken | None:
        from kintsugi_site.mcp_memory import AGENT_SUBJECT, agent_token_for

        if token.startswith("kag_"):  # a recording token, for the memory tools (kintsugi_site.mcp_memory)
            found = await sync_to_async(agent_token_for, thread_sensitive=False)(token)
            if found is None:
                return None
            return AccessToken(token=token, client_id=f"{AGENT_SUBJECT}{found.prefix}", scopes=[],
                               subject=f"{AGENT_SUBJECT}{found.pk}")
        user = await sync_to_async(_user_for_token, thread_sensitive=False)(token)
        if user is None:
            return None
        return AccessToken(token=token, client_id=user.get_username(), scopes=[], subject=str(user.pk))


# --- the tools' plumbing --------------------------------------------------------------------------------------
async def _call(fn, **kwargs) -> dict[str, Any]:
    """Run `fn` (the Django work of one tool) in a worker thread as the token's user, with fresh database
    connections, and turn the services' exceptions into tool errors: a message, never a trace."""
    # The token lives in a context variable of this request: read it here, in the event loop's context.
    access = get_access_token()
    return await sync_to_async(_run, thread_sensitive=False)(access, fn, kwargs)


def _run(access: AccessToken | None, fn, kwargs: dict) -> dict[str, Any]:
    close_old_connections()
    user = None
    try:
        user = _user(access)
        validation.refuse_nul(kwargs, where="an argument")  # as the API's parser: a NUL anywhere is a 400
        return fn(user=user, **kwargs)
    except Exception as exc:
        # The REST API's mapping of the services' exceptions; a tool answers with the message only.
        mapped = map_domain_error(exc)
        if mapped is None:
            log.exception("MCP tool %s failed", fn.__name__)
            raise ToolError("internal error; it has been logged") from None
        status, code, message, details = mapped
        if status == 404 and fn in (approve_item, reject_item) and user is not None:
            # An item outside the user's workspaces: answered as missing, and the attempt is on their record.
            record_refusal(actor=user, via=Incident.Via.MCP, attempted=f"MCP {fn.__name__}",
                           subject_type="compensation_item", subject_id=str(kwargs.get("item", "")), status=status,
                           code=code, message=message, workspace=None)
        if status in REFUSALS_AUDITED and fn is flag_source and user is not None:
            subject = "/".join(str(kwargs[k]) for k in ("workspace", "source"))
            record_refusal(actor=user, via=Incident.Via.MCP, attempted="MCP flag_source", subject_type="source",
                           subject_id=subject, status=status, code=code, message=message,
                           workspace=tenancy.visible_workspaces(user=user).filter(name=kwargs["workspace"]).first())
        if code == "incident_already_open":
            message += f"; incident_status(incident={details['incident']}) follows it"
        raise ToolError(message) from None
    finally:
        close_old_connections()


def _user(access: AccessToken | None):
    user = None
    if access is not None and access.subject and str(access.subject).isdigit():  # not a recording token
        user = get_user_model().objects.filter(pk=int(access.subject), is_active=True).first()
    if user is None:
        raise PermissionError("not authenticated")
    return user


def _workspace(user, name: str, *, capability: str | None) -> Workspace:
    """The workspace `name` as `user` may read it with `capability`: a workspace they are not a member of
    is unknown, and without the capability the call is refused before any workspace is looked up, in
    the REST API's order (its RolePermission answers 403 before the object's 404)."""
    validation.identifier(name, field="workspace", max_length=validation.WORKSPACE_MAX)
    if capability is not None:  # None: the service asks it itself (flag_source), and records the refusal
        capabilities.require(user, capability)
    ws = tenancy.visible_workspaces(user=user).filter(name=name).first()
    if ws is None:
        raise LookupError(f"unknown workspace {name!r}")
    return ws


# --- what each tool does, as the user -------------------------------------------------------------------------
def blast_radius(*, user, workspace: str, source: str, limit: int, offset: int) -> dict[str, Any]:
    if not 1 <= limit <= MAX_BLAST_RADIUS_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_BLAST_RADIUS_PAGE} (the hard cap); page with offset")
    if offset < 0:
        raise ValueError("offset must be 0 or more")
    validation.source_id(source)
    ws = _workspace(user, workspace, capability="read_sources")
    radius = provenance_selectors.blast_radius(workspace=ws, source=source, limit=limit, offset=offset)
    return radius | {"workspace": workspace, "limit": limit, "offset": offset,
                     "more": offset + limit < radius["size"]}


def explain_path(*, user, workspace: str, source: str, action_id: int) -> dict[str, Any]:
    ws = _workspace(user, workspace, capability="read_sources")
    validation.source_id(source)
    steps = repair_explain.explain_action(workspace=ws, source=source, action_id=action_id)
    if not steps:
        raise LookupError(f"action {action_id} does not depend on source {source!r}")
    return {"workspace": ws.name, "source": source, "action": action_id, "steps": steps}


def flag_source(*, user, workspace: str, source: str, reason: str) -> dict[str, Any]:
    validation.source_id(source)
    incident = repair_services.flag_source(workspace=_workspace(user, workspace, capability=None), source_id=source,
                                           actor=user, reason=reason, via=Incident.Via.MCP)
    return repair_services.incident_summary(incident)


def what_if(*, user, workspace: str, source: str) -> dict[str, Any]:
    from repairs.what_if import what_if as compute

    validation.source_id(source)
    ws = _workspace(user, workspace, capability="flag")
    return compute(workspace=ws, source=source, actor=user, via=Incident.Via.MCP).to_json()


def suspicious_sources(*, user, workspace: str) -> dict[str, Any]:
    from repairs.suspicious import suspicious_sources as rank

    ws = _workspace(user, workspace, capability="read_sources")
    return {"workspace": ws.name, "sources": [s.to_json() for s in rank(workspace=ws)]}


def incident_status(*, user, incident: int) -> dict[str, Any]:
    capabilities.require(user, "read_incidents")
    visible = tenancy.visible_workspaces(user=user)
    found = Incident.objects.filter(pk=incident, workspace__in=visible).select_related("workspace").first()
    if found is None:
        raise LookupError(f"unknown incident {incident}")
    return repair_services.incident_summary(found)


# --- review ----------------------------------------------------------------------------------------------------
MAX_REVIEW_PAGE = 200


def _item_summary(item: CompensationItem, compensated: list[dict] | None = None) -> dict[str, Any]:
    """What a reviewing agent needs to decide: the draft, its money as cents and as text, whether it waits
    for another item (an email held until the money item it speaks of is approved), and the effects it
    compensates as the REST API shows them (`compensated`: looked up for a whole page at once)."""
    held = sequencing.waits_for(item) if item.status in (CompensationItem.Status.PENDING,
                                                         CompensationItem.Status.APPROVED) else None
    return {"id": item.pk, "incident": item.incident_id, "workspace": item.incident.workspace.name, "kind": item.kind,
            "status": item.status, "ticket": item.ticket_id, "customer_email": item.customer_email, "to": item.to,
            "subject": item.subject, "body": item.body, "amount_cents": item.amount_cents, "currency": item.currency,
            "amount": item.amount_display if item.moves_money else None, "valid": item.valid,
            "problems": item.problems, "decides": effect_kinds.decides(item), "waits_for": held.pk if held else None,
            # Why an approved item has not left (its repair not verified clean), None when nothing holds it so.
            "held": gates.execution_wait(item.incident) if item.status == CompensationItem.Status.APPROVED else None,
            "decided_by": item.decided_by.get_username() if item.decided_by else None,
            "decision_reason": item.decision_reason or None, "content_hash": approval.content_hash(item),
            "message": None if item.kind == CompensationItem.Kind.MANUAL_COMPENSATION else outgoing.message(item).as_dict(),
            "compensates": compensated if compensated is not None else links.compensates([item])[item.pk]}


def _visible_item(user, item: int) -> CompensationItem:
    found = (compensation_selectors.review_queue().filter(incident__workspace__in=tenancy.visible_workspaces(user=user))
             .filter(pk=item).first())
    if found is None:
        raise LookupError(f"unknown compensation item {item}")
    return found


def review_items(*, user, workspace: str, incident: int | None, status: str | None, limit: int,
                 offset: int) -> dict[str, Any]:
    if not 1 <= limit <= MAX_REVIEW_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_REVIEW_PAGE}; page with offset")
    if offset < 0:
        raise ValueError("offset must be 0 or more")
    if status is not None and status not in CompensationItem.Status.values:
        raise ValueError(f"status must be one of {', '.join(CompensationItem.Status.values)}")
    items = compensation_selectors.review_queue(workspace=_workspace(user, workspace, capability="read_items"))
    if incident is not None:
        items = items.filter(incident_id=incident)
    if status is not None:
        items = items.filter(status=status)
    total = items.count()
    page = list(items[offset:offset + limit])
    compensated = links.compensates(page)
    page = [_item_summary(i, compensated[i.pk]) for i in page]
    return {"workspace": workspace, "total": total, "limit": limit, "offset": offset,
            "more": offset + limit < total, "items": page}


def approve_item(*, user, item: int, reason: str, content_hash: str | None = None) -> dict[str, Any]:
    decided = compensation_services.approve_item(item=_visible_item(user, item), actor=user, reason=reason,
                                                 via=Incident.Via.MCP, shown=content_hash or None)
    return _item_summary(compensation_selectors.review_queue().get(pk=decided.pk))


def reject_item(*, user, item: int, reason: str) -> dict[str, Any]:
    decided = compensation_services.reject_item(item=_visible_item(user, item), actor=user, reason=reason,
                                                via=Incident.Via.MCP)
    warning = sequencing.rejection_warning(decided)
    return _item_summary(compensation_selectors.review_queue().get(pk=decided.pk)) | {"warning": warning or None}


# --- the server -----------------------------------------------------------------------------------------------
def build_server() -> MCPServer:
    server = MCPServer(
        name="kintsugi", instructions=INSTRUCTIONS, token_verifier=DjangoTokenVerifier(),
        # The tokens are DRF tokens that this Django site issues (admin, or `manage.py drf_create_token`).
        # No resource_server_url: no OAuth discovery document is published, clients send the token as a header.
        auth=AuthSettings(issuer_url=settings.KINTSUGI_MCP_ISSUER_URL, resource_server_url=None),
    )
    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(name="blast_radius", annotations=reads)
    async def blast_radius_tool(workspace: str, source: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """What flagging `source` (e.g. "partner-blog/policy-update") in `workspace` would touch: the actions
        downstream of it in re-execution order (paged by limit/offset, at most 500 a page), the tickets,
        the live external effects and the refund amount at stake."""
        return await _call(blast_radius, workspace=workspace, source=source, limit=limit, offset=offset)

    @server.tool(name="explain_path", annotations=reads)
    async def explain_path_tool(workspace: str, source: str, action_id: int) -> dict[str, Any]:
        """Why action `action_id` depends on `source`: the shortest chain from the action that ingested the
        source, step by step, with the facts each step read and the handoffs it made."""
        return await _call(explain_path, workspace=workspace, source=source, action_id=action_id)

    @server.tool(name="flag_source", annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                                                 idempotentHint=False, openWorldHint=False))
    async def flag_source_tool(workspace: str, source: str, reason: str) -> dict[str, Any]:
        """Flag `source` as bad, with a reason: opens an incident and starts the repair in the background.
        Needs the Support lead role; one open incident per source. Returns the incident; follow it with
        incident_status."""
        return await _call(flag_source, workspace=workspace, source=source, reason=reason)

    @server.tool(name="what_if", annotations=reads)
    async def what_if_tool(workspace: str, source: str) -> dict[str, Any]:
        """What flagging `source` would do, without doing it: the exact repair outcome (counts poisoned,
        rerun_changed, rerun_same, skipped, superseded, new; effects invalidated; compensation items;
        money to be reversed per currency in cents; tickets whose decision changes, before and after) and
        the desk fingerprint it holds for. Needs the Support lead role; changes nothing."""
        return await _call(what_if, workspace=workspace, source=source)

    @server.tool(name="suspicious_sources", annotations=reads)
    async def suspicious_sources_tool(workspace: str) -> dict[str, Any]:
        """The sources of `workspace` worth a look, best first, each with plain reasons (a contradicted or
        loosened fact, trust, novelty, reach, what flagging it would change). A suggestion, never a flag."""
        return await _call(suspicious_sources, workspace=workspace)

    @server.tool(name="incident_status", annotations=reads)
    async def incident_status_tool(incident: int) -> dict[str, Any]:
        """The status of an incident: progress while it repairs; then the blast radius, the outcome counts
        (poisoned, rerun_changed, rerun_same, skipped, superseded, new) and the verification diff."""
        return await _call(incident_status, incident=incident)

    decides = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True)

    @server.tool(name="review_items", annotations=reads)
    async def review_items_tool(workspace: str, incident: int | None = None, status: str | None = ItemStatus.PENDING,
                                limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """The compensation items of `workspace` people decide, pending first (filter by incident and status:
        pending, approved, executed, rejected, cancelled; null for all), paged by limit/offset (at most 200).
        Each names its kind, ticket, customer, draft, amount (cents and text), whether it is valid, and the
        item it waits for (an email held until the money item it speaks of is approved)."""
        return await _call(review_items, workspace=workspace, incident=incident, status=status, limit=limit,
                           offset=offset)

    @server.tool(name="approve_item", annotations=decides)
    async def approve_item_tool(item: int, reason: str = "", content_hash: str | None = None) -> dict[str, Any]:
        """Approve a pending, valid compensation item: it then leaves (a reversal request, an email) exactly
        once, an email only after the money item it speaks of. Needs the Reviewer role; never the flagger of
        the item's incident (four-eyes). A manual compensation needs a reason saying what was done. Pass the
        item's content_hash from review_items to approve only the message you read (refused if it changed)."""
        return await _call(approve_item, item=item, reason=reason, content_hash=content_hash)

    @server.tool(name="reject_item", annotations=decides)
    async def reject_item_tool(item: int, reason: str) -> dict[str, Any]:
        """Reject a pending compensation item, with a reason. Rejecting a money item marks the emails that
        speak of it for rejection or re-drafting (the answer's `warning` names them). Same rules as approve."""
        return await _call(reject_item, item=item, reason=reason)

    from kintsugi_site.mcp_memory import register_memory_tools
    from kintsugi_site.mcp_prov import register_prov_tools

    register_memory_tools(server)
    register_prov_tools(server)
    return server


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def transport_security(*, host: str, port: int, extra_hosts=(), extra_origins=()) -> TransportSecuritySettings:
    """Only requests naming this server in Host (and, from browsers, Origin) are served: a DNS-rebinding
    page or a foreign site gets 421/403 before any tool runs."""
    names = ["127.0.0.1", "localhost", "[::1]"] if _is_loopback(host) else [host]
    hosts = [f"{n}:{port}" for n in names] + list(extra_hosts)
    origins = [f"http://{n}:{port}" for n in names] + list(extra_origins)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


class TokenSchemeAsBearer:
    """ASGI shim: `Authorization: Token <key>` (the REST API's scheme) is read as `Bearer <key>`, the
    only scheme the SDK's bearer middleware parses, so one header works for both endpoints."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = [(k, b"Bearer " + v[6:] if k == b"authorization" and v[:6].lower() == b"token " else v)
                       for k, v in scope["headers"]]
            scope = dict(scope, headers=headers)
        await self.app(scope, receive, send)


def build_app(*, host: str = "127.0.0.1", port: int = 8765, extra_hosts=(), extra_origins=()):
    """The ASGI app serving the MCP endpoint at /mcp."""
    app = build_server().streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host,
        transport_security=transport_security(host=host, port=port, extra_hosts=extra_hosts,
                                              extra_origins=extra_origins))
    return BodyLimit(TokenSchemeAsBearer(app))
