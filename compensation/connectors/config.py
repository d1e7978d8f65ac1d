"""Which connector delivers an item kind in a workspace, and where its secrets come from.

A workspace's choice (WorkspaceConnector, set by a Workspace admin through
compensation.deliveries.set_connector, audited) wins; otherwise the deployment's default from
KINTSUGI_CONNECTORS (e.g. "refund_reversal=stripe,correction_email=smtp"), otherwise the sandbox ledger
for money and the outbox for email. Secrets never live in the database: options name an environment
variable, whose value is the secret, or whose `<NAME>_FILE` twin names a file holding it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from compensation.connectors.base import connector
from compensation.models import CompensationItem

K = CompensationItem.Kind
SANDBOX_DEFAULTS = {K.REFUND_REVERSAL: "sandbox_ledger", K.REPLACEMENT_REFUND: "sandbox_ledger",
                    K.CORRECTION_EMAIL: "outbox", K.REPLACEMENT_EMAIL: "outbox",
                    K.MANUAL_COMPENSATION: "manual"}


def secret(name: str) -> str:
    """The secret an environment variable holds, or the first line of the file `<name>_FILE` names."""
    if not name:
        return ""
    value = os.environ.get(name, "")
    if value:
        return value
    path = os.environ.get(f"{name}_FILE", "")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return ""
    return ""


def defaults() -> dict[str, str]:
    chosen = dict(SANDBOX_DEFAULTS)
    for part in filter(None, (p.strip() for p in settings.KINTSUGI_CONNECTORS.split(","))):
        kind, _, name = part.partition("=")
        chosen[kind.strip()] = name.strip()
    return chosen


def choice(*, workspace_id: int, kind: str) -> tuple[str, dict]:
    """(connector name, options) for one item kind of one workspace."""
    from compensation.delivery_models import WorkspaceConnector

    row = WorkspaceConnector.objects.filter(workspace_id=workspace_id, kind=kind).first()
    if row is not None:
        return row.connector, dict(row.options)
    return defaults().get(kind, "manual"), {}


def listing(*, workspace_id: int) -> dict[str, dict]:
    """Every item kind: its connector and whether that connector has what it needs to deliver."""
    out = {}
    for kind in K.values:
        name, options = choice(workspace_id=workspace_id, kind=kind)
        try:
            configured = connector(name).configured(options)
        except ValueError:
            configured = False
        out[kind] = {"connector": name, "configured": configured}
    return out


@dataclass(frozen=True)
class ConnectorRow:
    """One item kind's connector in a workspace, as a page shows it: never a secret, only whether it is set."""

    kind: str
    kind_label: str
    connector: str
    label: str
    chosen: bool  # the workspace's own choice (else the deployment's default)
    configured: bool
    options: tuple[tuple[str, str], ...]  # non-secret settings, a URL without its query
    secrets: tuple[tuple[str, str, bool], ...]  # (option, environment variable, set?)
    choices: tuple[tuple[str, str], ...]  # the connectors that can deliver this kind


def _shown(key: str, value) -> str:
    text = str(value)
    if key == "url":
        # A query string may carry a receiver's token: the page shows where, never with what.
        parts = urlsplit(text)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) + ("?…" if parts.query else "")
    return text[:200]


def rows(*, workspace_id: int) -> list[ConnectorRow]:
    """Every item kind's connector, its configuration status and non-secret options, in one query."""
    from compensation.connectors.base import CONNECTORS
    from compensation.delivery_models import WorkspaceConnector

    connector("sandbox_ledger")  # registers the built-in connectors
    chosen = {r.kind: r for r in WorkspaceConnector.objects.filter(workspace_id=workspace_id)}
    fallback = defaults()
    out = []
    for kind, kind_label in K.choices:
        row = chosen.get(kind)
        name, options = (row.connector, dict(row.options)) if row else (fallback.get(kind, "manual"), {})
        try:
            found = connector(name)
            configured, label = found.configured(options), found.label
        except ValueError:
            found, configured, label = None, False, f"{name} (unknown)"
        secrets = tuple((opt, options.get(opt) or env, bool(secret(options.get(opt) or env)))
                        for opt, env in (found.secret_options.items() if found else ()))
        shown = tuple((k, _shown(k, v)) for k, v in sorted(options.items()) if not k.lower().endswith("_env"))
        out.append(ConnectorRow(kind=kind, kind_label=kind_label, connector=name, label=label, chosen=row is not None,
                                configured=configured, options=shown, secrets=secrets,
                                choices=tuple((c.name, c.label) for c in sorted(CONNECTORS.values(), key=lambda c: c.name)
                                              if kind in c.kinds)))
    return out
