"""Services that set up a workspace for its agents without a superuser: the workspace itself, its
sources, tickets, agent registrations and recording tokens.

Who may: superusers anywhere; a Workspace admin (core.roles) in the workspaces they belong to.
Creating a workspace needs provenance.add_workspace and makes the creator a member of it, so the
creator administers what they created. Each change writes its audit row in the same transaction.
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from core.audit import trail

from core import egress
from core.errors import DomainError
from core.vocabulary import AuditAction
from provenance.access import tenancy, tokens
from provenance import validation
from provenance.agents import NAME_PATTERN, registered_names
from provenance.access.membership import attributed
from provenance.models import (AgentRegistration, AgentToken, LedgerEntry, Source, Ticket, Workspace,
                               new_replay_secret)

ADD_WORKSPACE = "provenance.add_workspace"
MANAGE_AGENTS = "provenance.manage_agents"
TOKEN_PREFIX = "kag_"  # tells a recording token from a person's API token at a glance
MAX_REPLAY_TIMEOUT = 600


class OnboardingRefused(PermissionError):
    pass


def _audit(*, workspace, action: str, subject_type: str, subject_id, actor, reason: str, via: str,
           data: dict | None = None) -> None:
    trail.record(action=action, subject_type=subject_type, subject_id=subject_id, via=via, actor=actor,
                 reason=reason, data=data, workspace=workspace)


def _require(actor, workspace: Workspace, perm: str, *, via: str, what: str) -> None:
    """Seeing the workspace comes first (another workspace is a 404), then the role."""
    tenancy.require_visible(actor, workspace, via=via, what=f"workspace {workspace.name!r}")
    if via == tenancy.OPERATOR_VIA and actor is None:
        return
    if actor is None or not actor.is_active or not (actor.is_superuser or actor.has_perm(perm)):
        raise OnboardingRefused(f"user {getattr(actor, 'username', None)!r} may not {what} in workspace "
                                f"{workspace.name!r} (superuser or its Workspace admin needed)")


def may_manage_agents(actor, workspace: Workspace) -> bool:
    if actor is None or not getattr(actor, "is_active", False) or not tenancy.may_see(actor, workspace):
        return False
    return actor.is_superuser or actor.has_perm(MANAGE_AGENTS)


def create_workspace(*, name: str, actor, reason: str, via: str) -> Workspace:
    """A new, empty workspace whose first member is its creator."""
    if actor is None or not actor.is_active or not (actor.is_superuser or actor.has_perm(ADD_WORKSPACE)):
        raise OnboardingRefused(f"user {getattr(actor, 'username', None)!r} may not create workspaces "
                                f"(superuser or the Workspace admin role needed)")
    name = validation.workspace_name(name)
    reason = validation.reason(reason)
    with transaction.atomic():
        if Workspace.objects.filter(name=name).exists():
            raise WorkspaceExists(f"workspace {name!r} already exists")
        workspace = Workspace.objects.create(name=name)
        with attributed(actor=actor, reason=reason, via=via):
            workspace.members.add(actor)
        _audit(workspace=workspace, action=AuditAction.WORKSPACE_CREATED, subject_type="workspace", subject_id=workspace.pk,
               actor=actor, reason=reason, via=via, data={"name": name})
    return workspace


class WorkspaceExists(ValueError):
    pass


class AlreadyExists(DomainError, ValueError):
    """A create named something that exists: creating never overwrites (a change is an update)."""

    code, status = "already_exists", 409


class ChangeRefused(DomainError, ValueError):
    """An update the object's history forbids (money already moved on the ticket)."""

    code, status = "change_refused", 409


MODES = ("create", "update", "upsert")


def _mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    return mode


def put_source(*, workspace: Workspace, source_id: str, content: str | None, title: str = "",
               trust: str | None = None, actor, reason: str, via: str, mode: str = "upsert") -> tuple[Source, bool]:
    """Create a source (mode `create`: AlreadyExists if it exists), change one (`update`: LookupError if
    it does not; `content` None keeps it) or either (`upsert`, the command line's). Returns (source,
    created). `trust` is the new source's level; changing an existing source's trust is a Support
    lead's call (provenance.access.trust)."""
    _require(actor, workspace, "provenance.change_source", via=via, what="change sources")
    _mode(mode)
    if trust is not None and trust not in Source.Trust.values:
        raise validation.InvalidInput(f"trust must be one of {', '.join(Source.Trust.values)}")
    source_id = validation.source_id(source_id)
    if content is None and mode != "update":
        raise validation.InvalidInput("a new source needs its content")
    if content is not None:
        content = validation.text(content, field="content", max_length=validation.MAX_FACT_VALUE_BYTES)
    title = validation.text(title, field="title", max_length=200) if title else ""
    reason = validation.reason(reason)
    with transaction.atomic():
        source = Source.objects.select_for_update().filter(workspace=workspace, source_id=source_id).first()
        if source is not None and mode == "create":
            raise AlreadyExists(f"source {source_id!r} already exists in workspace {workspace.name!r}; "
                                f"change it with PUT or PATCH and a reason")
        if source is None and mode == "update":
            raise LookupError(f"no source {source_id!r} in workspace {workspace.name!r}")
        created = source is None
        if created:
            source = Source.objects.create(workspace=workspace, source_id=source_id, content=content, title=title,
                                           trust=trust or Source.Trust.UNKNOWN)
        else:
            source.content, source.title = (source.content if content is None else content), title or source.title
            source.save(update_fields=["content", "title"])
        _audit(workspace=workspace, action=AuditAction.SOURCE_CREATED if created else AuditAction.SOURCE_CHANGED, subject_type="source",
               subject_id=source.source_id, actor=actor, reason=reason, via=via,
               data={"sha256": hashlib.sha256(source.content.encode()).hexdigest(),
                     "bytes": len(source.content.encode()), "trust": source.trust})
        if not created and trust is not None and trust != source.trust:
            from provenance.access.trust import set_source_trust

            source = set_source_trust(source=source, level=trust, actor=actor, reason=reason, via=via)
    return source, created


TICKET_FIELDS = ("customer_name", "customer_email", "subject", "body", "amount_cents", "currency", "tier",
                 "payment_reference", "locale")


# What may still change once money has moved on a ticket: its wording, never who is paid or how much.
TEXT_FIELDS = ("customer_name", "subject", "body", "locale")


def put_ticket(*, workspace: Workspace, ticket_id: str, fields: dict, actor, reason: str, via: str,
               mode: str = "upsert") -> tuple[Ticket, bool]:
    """Create a ticket (mode `create`: AlreadyExists if it exists), change its fields (`update`:
    LookupError if it does not; ChangeRefused for anything but its text once money was executed on it,
    i.e. the ledger holds a row for it) or either (`upsert`). Returns (ticket, created)."""
    _require(actor, workspace, "provenance.change_ticket", via=via, what="change tickets")
    _mode(mode)
    ticket_id = validation.ticket_id(ticket_id)
    unknown = sorted(set(fields) - set(TICKET_FIELDS))
    if unknown:
        raise ValueError(f"unknown ticket fields: {', '.join(unknown)}")
    clean = {}
    for name, value in fields.items():
        if name == "amount_cents":
            clean[name] = validation.amount_cents(value)
        elif name == "currency":
            clean[name] = validation.currency(value)
        elif name == "customer_email":
            clean[name] = validation.email(value, field=name)
        elif name == "locale":
            clean[name] = validation.locale(value, field=name)
        elif name == "body":
            clean[name] = validation.text(value, field=name, max_length=validation.MAX_PAYLOAD_BYTES // 2)
        else:
            clean[name] = validation.text(value, field=name, max_length=Ticket._meta.get_field(name).max_length)
    reason = validation.reason(reason)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(workspace=workspace, ticket_id=ticket_id).first()
        if ticket is not None and mode == "create":
            raise AlreadyExists(f"ticket {ticket_id!r} already exists in workspace {workspace.name!r}; "
                                f"change it with PUT or PATCH and a reason")
        if ticket is None and mode == "update":
            raise LookupError(f"no ticket {ticket_id!r} in workspace {workspace.name!r}")
        created = ticket is None
        money = sorted(f for f in set(clean) - set(TEXT_FIELDS) if ticket is not None and getattr(ticket, f) != clean[f])
        if not created and money and LedgerEntry.objects.filter(workspace=workspace, ticket_id=ticket_id).exists():
            raise ChangeRefused(f"ticket {ticket_id!r} has executed money; only its text "
                                f"({', '.join(TEXT_FIELDS)}) may change, not {', '.join(money)}")
        if created:
            missing = [f for f in ("customer_name", "customer_email", "subject", "body", "amount_cents")
                       if f not in clean]
            if missing:
                raise ValueError(f"a new ticket needs {', '.join(missing)}")
            ticket = Ticket.objects.create(workspace=workspace, ticket_id=ticket_id, **clean)
        else:
            for name, value in clean.items():
                setattr(ticket, name, value)
            ticket.save()
        _audit(workspace=workspace, action=AuditAction.TICKET_CREATED if created else AuditAction.TICKET_CHANGED, subject_type="ticket",
               subject_id=ticket.ticket_id, actor=actor, reason=reason, via=via, data={"fields": sorted(clean)})
    return ticket, created


def replay_url(value) -> str:
    url = validation.identifier(value, field="replay_url", max_length=500)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise validation.InvalidInput("replay_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise validation.InvalidInput("replay_url must not carry credentials; the replay brings its own token")
    try:
        return egress.check_url(url)
    except egress.EgressRefused as exc:
        raise validation.InvalidInput(f"replay_url: {exc}") from None


def remote_agent_name(value) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise validation.InvalidInput(f"agent name must match {NAME_PATTERN.pattern}")
    if value in registered_names():
        raise validation.InvalidInput(f"{value!r} is an in-process agent of this deployment; register the remote "
                                      f"agent under another name")
    return value


def replay_timeout(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPLAY_TIMEOUT:
        raise validation.InvalidInput(f"timeout_seconds must be a whole number from 1 to {MAX_REPLAY_TIMEOUT}")
    return value


def register_agent(*, workspace: Workspace, name: str, replay: str, timeout_seconds: int = 30, actor, reason: str,
                   via: str) -> tuple[AgentRegistration, bool]:
    """Register (or re-point) an agent that runs in another process. Returns (registration, created).
    The field checks are remote_agent_name, replay_url and replay_timeout (the admin's form shows them).
    A new registration gets its replay signing secret (registration.replay_secret): the caller shows it
    once, now; re-pointing keeps it (rotate_replay_secret replaces it)."""
    _require(actor, workspace, MANAGE_AGENTS, via=via, what="register agents")
    name = remote_agent_name(name)
    replay = replay_url(replay)
    timeout_seconds = replay_timeout(timeout_seconds)
    reason = validation.reason(reason)
    with transaction.atomic():
        registration, created = AgentRegistration.objects.select_for_update().get_or_create(
            workspace=workspace, name=name,
            defaults={"replay_url": replay, "timeout_seconds": timeout_seconds, "created_by": actor})
        if not created:
            registration.replay_url, registration.timeout_seconds = replay, timeout_seconds
            registration.save(update_fields=["replay_url", "timeout_seconds", "updated_at"])
        _audit(workspace=workspace, action=AuditAction.AGENT_REGISTERED if created else AuditAction.AGENT_CHANGED, subject_type="agent",
               subject_id=name, actor=actor, reason=reason, via=via,
               data={"replay_url": replay, "timeout_seconds": timeout_seconds})
    return registration, created


def rotate_replay_secret(*, registration: AgentRegistration, actor, reason: str, via: str) -> AgentRegistration:
    """A new secret for signing the agent's replays, the old one refused from the next replay on.
    Returns the registration with the new secret, to show once; the audit row never holds it."""
    _require(actor, registration.workspace, MANAGE_AGENTS, via=via, what="rotate replay secrets")
    reason = validation.reason(reason)
    with transaction.atomic():
        registration = AgentRegistration.objects.select_for_update().get(pk=registration.pk)
        registration.replay_secret = new_replay_secret()
        registration.save(update_fields=["replay_secret", "updated_at"])
        _audit(workspace=registration.workspace, action=AuditAction.AGENT_SECRET_ROTATED, subject_type="agent",
               subject_id=registration.name, actor=actor, reason=reason, via=via,
               data={"fingerprint": hash_key(registration.replay_secret)[:12]})
    return registration


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_agents(agents) -> list[str]:
    """The agents a token may record as (empty: any agent of its workspace)."""
    agents = list(agents or [])
    for name in agents:
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise validation.InvalidInput(f"agent names must match {NAME_PATTERN.pattern}")
    return agents


def issue_agent_token(*, workspace: Workspace, label: str, agents: list[str] | None = None, actor, reason: str,
                      via: str, expires_in_days=None) -> tuple[AgentToken, str]:
    """A new recording token for `workspace` (only for `agents`, if given; refused after
    `expires_in_days`, if given). Returns (token, key): the key is shown once and never stored."""
    _require(actor, workspace, MANAGE_AGENTS, via=via, what="issue agent tokens")
    label = validation.text(label, field="label", max_length=100)
    agents = token_agents(agents)
    reason = validation.reason(reason)
    until = tokens.expiry(expires_in_days)
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = AgentToken.objects.create(workspace=workspace, label=label, key_hash=hash_key(key),
                                          prefix=key[:10], agents=sorted(set(agents)), created_by=actor,
                                          expires_at=until)
        _audit(workspace=workspace, action=AuditAction.AGENT_TOKEN_ISSUED, subject_type="agent_token", subject_id=token.pk,
               actor=actor, reason=reason, via=via, data={"label": label, "agents": token.agents, "prefix": token.prefix,
                                                          "expires_at": until.isoformat() if until else None})
    return token, key


def rotate_agent_token(*, token: AgentToken, actor, reason: str, via: str,
                       expires_in_days=None) -> tuple[AgentToken, str]:
    """Replace a recording token: a new key with the same label and agents (and the given expiry), the
    old one revoked in the same transaction. Returns (new token, its key)."""
    with transaction.atomic():
        new, key = issue_agent_token(workspace=token.workspace, label=token.label, agents=token.agents, actor=actor,
                                     reason=reason, via=via, expires_in_days=expires_in_days)
        revoke_agent_token(token=token, actor=actor, reason=f"rotated to token {new.pk}: {reason}", via=via)
    return new, key


def revoke_agent_token(*, token: AgentToken, actor, reason: str, via: str) -> AgentToken:
    _require(actor, token.workspace, MANAGE_AGENTS, via=via, what="revoke agent tokens")
    reason = validation.reason(reason)
    with transaction.atomic():
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            forget_token(token)
            transaction.on_commit(lambda: forget_token(token))
            _audit(workspace=token.workspace, action=AuditAction.AGENT_TOKEN_REVOKED, subject_type="agent_token",
                   subject_id=token.pk, actor=actor, reason=reason, via=via, data={"prefix": token.prefix})
    return token


# An agent recording call by call authenticates every call: the token it found is kept for a moment in
# this process, so a busy agent costs one token lookup every few seconds, not one per call. Revoking
# forgets it here at once; other processes refuse the key within TOKEN_CACHE_SECONDS.
TOKEN_CACHE_SECONDS = 2.0
_tokens: dict[str, tuple[float, AgentToken]] = {}
_tokens_lock = threading.Lock()


def token_for_key(key: str) -> AgentToken | None:
    """The live token whose key this is (None for an unknown, revoked or expired key); records its use."""
    if not isinstance(key, str) or not key.startswith(TOKEN_PREFIX) or len(key) > 100:
        return None
    digest, now = hash_key(key), time.monotonic()
    with _tokens_lock:
        cached = _tokens.get(digest)
    if cached and cached[0] > now:
        token = cached[1]
    else:
        token = (AgentToken.objects.select_related("workspace")
                 .filter(key_hash=digest, revoked_at__isnull=True).first())
        with _tokens_lock:
            if token is None:
                _tokens.pop(digest, None)
            else:
                if len(_tokens) > 1000:
                    _tokens.clear()
                _tokens[digest] = (now + TOKEN_CACHE_SECONDS, token)
    if token is None or tokens.expired(token.expires_at):
        return None
    # The cached row is shared by the process's requests: without the new last use in it, every request
    # until the cache expires would write it again.
    token.last_used_at = tokens.touch(AgentToken, token.pk, token.last_used_at)
    return token


def forget_token(token: AgentToken) -> None:
    with _tokens_lock:
        _tokens.pop(token.key_hash, None)
