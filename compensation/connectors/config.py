"""Which connector delivers an item kind in a workspace, and where its secrets come from.

A workspace's choice (WorkspaceConnector, set by a Workspace admin through
compensation.deliveries.set_connector, audited) wins; otherwise the deployment's default from
KINTSUGI_CONNECTORS (e.g. "refund_reversal=stripe,correction_email=smtp"), otherwise the sandbox ledger
for money and the outbox for email. Secrets never live in the database: options name an environment
variable, whose value is the secret, or whose `<NAME>_FILE` twin names a file holding it."""
from __future__ import annotations

import os
from pathlib import Path

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
