"""Tokens an operator can trust: API tokens (a person's, rest_framework.authtoken) and recording tokens
(a workspace's, provenance.onboarding) may carry an expiry, are rotated by issuing a new key that
replaces the old one, and show when they were last used.

Expiry is checked wherever a token is accepted (the REST API's authentication, the MCP endpoint, the
recording API). Last use is written at most once a minute per token (LAST_USE_EVERY), and only when the
token row read for authentication says it is older than that: a busy agent costs one UPDATE a minute,
not one a request.
"""
from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.vocabulary import AuditAction
from provenance import validation

LAST_USE_EVERY = timedelta(minutes=1)
MAX_EXPIRY_DAYS = 3650


class TokenExpired(PermissionError):
    pass


def expiry(days) -> "timezone.datetime | None":
    """The moment `days` from now (None: never), for --expires-in and the services."""
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not 0 < days <= MAX_EXPIRY_DAYS:
        raise validation.InvalidInput(f"expires-in must be a number of days between 1 and {MAX_EXPIRY_DAYS}")
    return timezone.now() + timedelta(days=days)


def expired(expires_at) -> bool:
    return expires_at is not None and expires_at <= timezone.now()


def touch(model, pk, last_used_at):
    """Record a use, unless one was recorded less than LAST_USE_EVERY ago; returns the last use as it now
    stands, for a caller that keeps the row in memory between requests."""
    now = timezone.now()
    if last_used_at is None or now - last_used_at >= LAST_USE_EVERY:
        model.objects.filter(pk=pk).update(last_used_at=now)
        return now
    return last_used_at


# --- API tokens (a person's) ------------------------------------------------------------------------------
def api_token_user(key: str):
    """(user, token) for a live API token key; None for an unknown key or an inactive user; raises
    TokenExpired for an expired one."""
    from rest_framework.authtoken.models import Token

    from provenance.models import ApiTokenLease

    token = Token.objects.select_related("user", "lease").filter(key=key).first() if isinstance(key, str) else None
    if token is None or not token.user.is_active:
        return None
    lease = getattr(token, "lease", None)
    if lease is None:
        ApiTokenLease.objects.get_or_create(token=token, defaults={"last_used_at": timezone.now()})
    else:
        if expired(lease.expires_at):
            raise TokenExpired(f"the API token {key[:6]}… expired at {lease.expires_at:%Y-%m-%d %H:%M} UTC")
        touch(ApiTokenLease, lease.pk, lease.last_used_at)
    return token.user, token


def issue_api_token(*, user, expires_in_days=None, actor, reason: str, via: str):
    """A new API token for `user`, replacing the one they had (DRF keeps one per person): rotation and
    issue are the same act, and the old key is refused from now on. People rotate their own; a
    superuser anyone's; the command line is the operator's. Returns (token, key), audited in the
    system chain (a person's token is no workspace's)."""
    from rest_framework.authtoken.models import Token

    from provenance import tenancy
    from provenance.models import ApiTokenLease
    from provenance.onboarding import OnboardingRefused, _audit

    if via != tenancy.OPERATOR_VIA and not (actor is not None and actor.is_active
                                           and (actor.pk == user.pk or actor.is_superuser)):
        raise OnboardingRefused("only the token's owner or a superuser may issue or rotate an API token")
    until = expiry(expires_in_days)
    reason = validation.reason(reason)
    with transaction.atomic():
        old = Token.objects.filter(user=user).first()
        if old is not None:
            old.delete()
        token = Token.objects.create(user=user, key=secrets.token_hex(20))
        ApiTokenLease.objects.create(token=token, expires_at=until)
        _audit(workspace=None, action=AuditAction.API_TOKEN_ROTATED if old else AuditAction.API_TOKEN_ISSUED,
               subject_type="api_token", subject_id=user.pk, actor=actor, reason=reason, via=via,
               data={"user": user.get_username(), "prefix": token.key[:6],
                     "expires_at": until.isoformat() if until else None})
    return token, token.key


def api_token_rows() -> list[dict]:
    """Every API token without its key: prefix, owner, created, expiry and last use (for operators)."""
    from rest_framework.authtoken.models import Token

    return [{"prefix": t.key[:6], "user": t.user.get_username(), "created": t.created,
             "expires_at": getattr(getattr(t, "lease", None), "expires_at", None),
             "last_used_at": getattr(getattr(t, "lease", None), "last_used_at", None)}
            for t in Token.objects.select_related("user", "lease").order_by("user__username")]
