"""The secrets a workspace's connector may name: a registry the operator configures, nothing else.

KINTSUGI_SECRETS lists them, comma-separated: `name=env:VARIABLE` (the secret is that environment
variable's value) or `name=file:/path` (the file's first line), and `name@acme|beta=...` restricts the
name to the workspaces acme and beta. Connector options (`secret_env`, `api_key_env`, ...) hold a name from
this registry; any other name is refused when the connector is chosen and reads as no secret when it
sends. Without it a workspace admin could name `HOME`, `DATABASE_URL` or a file such as the CA bundle and
have the worker send its value to a server of their choosing.

The built-in names (KINTSUGI_WEBHOOK_SECRET, KINTSUGI_SMTP_USERNAME / _PASSWORD, KINTSUGI_STRIPE_API_KEY,
KINTSUGI_STRIPE_WEBHOOK_SECRET) are registered by default, each read from its variable or, when that is
empty, from the file its `<NAME>_FILE` twin names: both set by the operator.

The deployment's own settings are never a secret a workspace may name, whatever the operator lists:
neither as a name nor as a source (variables of Django, the databases, the broker, FalkorDB, the model,
Postgres's client, the metrics token, the audit key), nor a file under KINTSUGI_HOME or the audit signing
key. Listing one stops the start (ImproperlyConfigured); a registry changed behind the settings' back is
refused the same way when read.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULT_NAMES = ("KINTSUGI_WEBHOOK_SECRET", "KINTSUGI_SMTP_USERNAME", "KINTSUGI_SMTP_PASSWORD",
                 "KINTSUGI_STRIPE_API_KEY", "KINTSUGI_STRIPE_WEBHOOK_SECRET")
DEPLOYMENT_VARIABLES = frozenset({
    "DJANGO_SECRET_KEY", "DATABASE_URL", "DATABASE_OWNER_URL", "FALKORDB_URL", "KINTSUGI_FALKORDB_URLS",
    "CELERY_BROKER_URL", "KINTSUGI_CACHE_URL", "KINTSUGI_AUDIT_SIGNING_KEY", "KINTSUGI_DB_APP_PASSWORD",
    "KINTSUGI_METRICS_TOKEN", "GEMINI_API_KEY", "KINTSUGI_HOME", "KINTSUGI_SECRETS", "KINTSUGI_EGRESS_ALLOW"})
DEPLOYMENT_PREFIXES = ("DJANGO_", "DATABASE_", "CELERY_", "FALKORDB_", "GEMINI_", "PG", "REDIS")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


class SecretRefused(ValueError):
    """A name a connector may not use (unknown, the deployment's own, or another workspace's)."""


@dataclass(frozen=True)
class Entry:
    name: str
    source: str  # "env" or "file"
    ref: str  # the variable's name, or the file's path
    workspaces: frozenset[str] = frozenset()  # empty: every workspace
    file_twin: bool = False  # the built-in names: `<ref>_FILE` names a file when the variable is empty


def deployment_variable(name: str) -> bool:
    """True for a variable of the deployment's own settings (or its `_FILE` twin)."""
    base = name.upper().removesuffix("_FILE")
    return base in DEPLOYMENT_VARIABLES or base.startswith(DEPLOYMENT_PREFIXES)


def _forbidden_file(path: str, audit_key: str) -> bool:
    from core import embedded

    resolved = Path(path).expanduser().resolve()
    protected = [embedded.kintsugi_home().resolve(), Path(audit_key).expanduser().resolve()]
    return resolved.is_relative_to("/proc") or any(resolved == p or resolved.is_relative_to(p) for p in protected)


def _problem(entry: Entry, audit_key: str) -> str | None:
    if deployment_variable(entry.name):
        return f"{entry.name!r} is one of the deployment's own settings, never a connector's secret"
    if entry.source == "env" and deployment_variable(entry.ref):
        return f"{entry.name!r} reads {entry.ref}, one of the deployment's own settings"
    if entry.source == "file" and _forbidden_file(entry.ref, audit_key):
        return f"{entry.name!r} reads a file of the deployment's own (under KINTSUGI_HOME or its audit key)"
    return None


def parse(text: str, *, audit_key: str | None = None) -> dict[str, Entry]:
    """KINTSUGI_SECRETS as entries by name; ImproperlyConfigured for a malformed entry or one of the
    deployment's own settings (a typo or a leak must stop the start, not register nothing). `audit_key`:
    the audit signing key's path, for the settings module (which has no django.conf.settings yet)."""
    audit_key = settings.KINTSUGI_AUDIT_SIGNING_KEY if audit_key is None else audit_key
    out: dict[str, Entry] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        head, eq, where = part.partition("=")
        name, _, scope = head.strip().partition("@")
        source, colon, ref = where.strip().partition(":")
        if not eq or not colon or source not in ("env", "file") or not ref.strip() or not NAME.fullmatch(name):
            raise ImproperlyConfigured(f"KINTSUGI_SECRETS entry {part!r} is not name=env:VARIABLE or "
                                       f"name=file:/path (name@workspace|other=... to restrict it)")
        workspaces = frozenset(w.strip() for w in scope.split("|") if w.strip())
        listed = Entry(name=name, source=source, ref=ref.strip(), workspaces=workspaces)
        problem = _problem(listed, audit_key)
        if problem:
            raise ImproperlyConfigured(f"KINTSUGI_SECRETS: {problem}")
        out[name] = listed
    return out


@lru_cache(maxsize=8)
def _registry(text: str) -> dict[str, Entry]:
    found = {n: Entry(name=n, source="env", ref=n, file_twin=True) for n in DEFAULT_NAMES}
    found.update(parse(text))
    return found


def registry() -> dict[str, Entry]:
    """Every name a connector may use: the built-in ones and the operator's."""
    return _registry(getattr(settings, "KINTSUGI_SECRETS", "") or "")


def entry(name: str, *, workspace: str) -> Entry:
    """The registered entry `name` for a connector of `workspace`; SecretRefused otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SecretRefused("a secret is named by a registered name (letters, digits, underscores)")
    if deployment_variable(name):
        raise SecretRefused(f"{name!r} is one of the deployment's own settings, never a connector's secret")
    found = registry().get(name)
    if found is None or (found.workspaces and workspace not in found.workspaces):
        raise SecretRefused(f"no secret named {name!r} is registered for this workspace (the operator lists "
                            f"them in KINTSUGI_SECRETS)")
    return found


def value(name: str, *, workspace: str) -> str:
    """The secret `name` holds for `workspace`, "" when it is not set; SecretRefused when not registered."""
    found = entry(name, workspace=workspace)
    if found.source == "env":
        held = os.environ.get(found.ref, "")
        twin = os.environ.get(f"{found.ref}_FILE", "") if found.file_twin and not held else ""
        return held or (_first_line(twin) if twin else "")
    return _first_line(found.ref)


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline(64 * 1024).strip()
    except (OSError, UnicodeError):
        return ""
