"""Tokens an operator can trust: API tokens (a person's, rest_framework.authtoken) and recording tokens
(a workspace's, provenance.access.onboarding) may carry an expiry, are rotated by issuing a new key that
replaces the old one, and show when they were last used.

Only a digest of an API token's key is stored (Token.key holds api_key_digest(key)), as recording tokens
store only their key's SHA-256: a copy of the database (a backup, a dump) holds nothing that logs in.
The key is shown once, when issued; every lookup digests the key presented. Every way a Token row is
created (issue_api_token, `drf_create_token`, the admin) is digested on save (hash_new_keys, a pre_save
signal), the key kept on the instance as `plain_key` for that one showing.

Expiry is checked wherever a token is accepted (the REST API's authentication, the MCP endpoint, the
recording API). Last use is written at most once a minute per token (LAST_USE_EVERY), and only when the
token row read for authentication says it is older than that: a busy agent costs one UPDATE a minute,
not one a request.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.vocabulary import AuditAction
from provenance import validation

LAST_USE_EVERY = timedelta(minutes=1)
MAX_EXPIRY_DAYS = 3650
DIGEST_MARK = "h"  # a key is hex (DRF's and ours): a stored value starting so is a digest, never a key
PREFIX_CHARS = 6


def api_key_digest(key: str) -> str:
    """What Token.key stores for `key`: 39 hex characters of its SHA-256 (156 bits) behind the mark,
    within DRF's 40-character column."""
    return DIGEST_MARK + hashlib.sha256(key.encode()).hexdigest()[:39]


def is_digest(value: str) -> bool:
    return len(value) == 40 and value.startswith(DIGEST_MARK)


def hash_new_keys(sender, instance, **kwargs) -> None:
    """pre_save of Token: a key about to be stored in the clear is stored as its digest instead."""
    if instance.key and not is_digest(instance.key):
        instance.plain_key = instance.key
        instance.key = api_key_digest(instance.key)


def lease_new_keys(sender, instance, created, **kwargs) -> None:
    """post_save of Token: a new token's lease, with the first characters of its key to tell it apart."""
    from provenance.models import ApiTokenLease

    plain = getattr(instance, "plain_key", None)
    if created and plain:
        ApiTokenLease.objects.update_or_create(token_id=instance.pk, defaults={"prefix": plain[:PREFIX_CHARS]})


def connect_signals() -> None:
    from django.db.models.signals import post_save, pre_save
    from rest_framework.authtoken.models import Token, TokenProxy

    for model in (Token, TokenProxy):
        pre_save.connect(hash_new_keys, sender=model, dispatch_uid=f"kintsugi.tokens.hash.{model.__name__}")
        post_save.connect(lease_new_keys, sender=model, dispatch_uid=f"kintsugi.tokens.lease.{model.__name__}")


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

    token = (Token.objects.select_related("user", "lease").filter(key=api_key_digest(key)).first()
             if isinstance(key, str) else None)
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

    from provenance.access import tenancy
    from provenance.models import ApiTokenLease
    from provenance.access.onboarding import OnboardingRefused, _audit

    if via != tenancy.OPERATOR_VIA and not (actor is not None and actor.is_active
                                           and (actor.pk == user.pk or actor.is_superuser)):
        raise OnboardingRefused("only the token's owner or a superuser may issue or rotate an API token")
    until = expiry(expires_in_days)
    reason = validation.reason(reason)
    with transaction.atomic():
        old = Token.objects.filter(user=user).first()
        if old is not None:
            old.delete()
        key = secrets.token_hex(20)
        token = Token.objects.create(user=user, key=key)  # stored as its digest (hash_new_keys)
        token.lease, _ = ApiTokenLease.objects.update_or_create(
            token=token, defaults={"expires_at": until, "prefix": key[:PREFIX_CHARS]})
        _audit(workspace=None, action=AuditAction.API_TOKEN_ROTATED if old else AuditAction.API_TOKEN_ISSUED,
               subject_type="api_token", subject_id=user.pk, actor=actor, reason=reason, via=via,
               data={"user": user.get_username(), "prefix": key[:PREFIX_CHARS],
                     "expires_at": until.isoformat() if until else None})
    return token, key


def api_token_rows() -> list[dict]:
    """Every API token without its key: prefix, owner, created, expiry and last use (for operators)."""
    from rest_framework.authtoken.models import Token

    return [{"prefix": getattr(getattr(t, "lease", None), "prefix", "") or "?", "user": t.user.get_username(),
             "created": t.created,
             "expires_at": getattr(getattr(t, "lease", None), "expires_at", None),
             "last_used_at": getattr(getattr(t, "lease", None), "last_used_at", None)}
            for t in Token.objects.select_related("user", "lease").order_by("user__username")]
