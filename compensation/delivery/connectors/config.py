"""Which connector delivers an item kind in a workspace, and where its secrets come from.

A workspace's choice (WorkspaceConnector, set by a Workspace admin through
compensation.delivery.deliveries.set_connector, audited) wins; otherwise the deployment's default from
KINTSUGI_CONNECTORS (e.g. "refund_reversal=stripe,correction_email=smtp"), otherwise the sandbox ledger
for money and the outbox for email. Secrets never live in the database: options name a secret of the
operator's registry (core.secret_registry), never a variable or a file of their own choosing."""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from compensation.drafting import kinds
from compensation.delivery.connectors.base import connector
from compensation.models import CompensationItem
from core import secret_registry
from core.scrub import redact_url

K = CompensationItem.Kind


def defaults() -> dict[str, str]:
    """Each registered kind's connector: its spec's, unless KINTSUGI_CONNECTORS names another."""
    chosen = {name: spec.connector for name, spec in kinds.ITEM_KINDS.items()}
    for part in filter(None, (p.strip() for p in settings.KINTSUGI_CONNECTORS.split(","))):
        kind, _, name = part.partition("=")
        chosen[kind.strip()] = name.strip()
    return chosen


def _default(kind: str) -> str:
    chosen = defaults()
    if kind not in chosen:
        raise kinds.UnknownKind(kind)
    return chosen[kind]


def choice(*, workspace_id: int, kind: str) -> tuple[str, dict]:
    """(connector name, options) for one item kind of one workspace."""
    from compensation.delivery_models import WorkspaceConnector

    row = WorkspaceConnector.objects.filter(workspace_id=workspace_id, kind=kind).first()
    if row is not None:
        return row.connector, dict(row.options)
    return _default(kind), {}


def _workspace_name(workspace_id: int) -> str:
    from provenance.models import Workspace

    return Workspace.objects.filter(pk=workspace_id).values_list("name", flat=True).first() or ""


def configured(name: str, options: dict, *, workspace: str) -> bool:
    """Whether connector `name` has what it needs; False for an unknown connector or an option the
    connector or the secret registry no longer accepts."""
    try:
        return connector(name).configured(options, workspace=workspace)
    except (ValueError, KeyError):  # SecretRefused is a ValueError
        return False


def listing(*, workspace_id: int) -> dict[str, dict]:
    """Every item kind: its connector and whether that connector has what it needs to deliver."""
    out = {}
    workspace = _workspace_name(workspace_id)
    for kind in K.values:
        name, options = choice(workspace_id=workspace_id, kind=kind)
        configured_now = configured(name, options, workspace=workspace)
        out[kind] = {"connector": name, "configured": configured_now}
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
    secrets: tuple[tuple[str, str, bool], ...]  # (option, registered secret name, set?)
    choices: tuple[tuple[str, str], ...]  # the connectors that can deliver this kind


def _shown(key: str, value) -> str:
    # A query string or the user part may carry a receiver's token: the page shows where, never with what.
    return redact_url(str(value))[:200] if key == "url" else str(value)[:200]


def _is_set(name: str, *, workspace: str) -> bool:
    try:
        return bool(secret_registry.value(name, workspace=workspace))
    except secret_registry.SecretRefused:
        return False


def rows(*, workspace_id: int) -> list[ConnectorRow]:
    """Every item kind's connector, its configuration status and non-secret options, in one query."""
    from compensation.delivery.connectors.base import CONNECTORS
    from compensation.delivery_models import WorkspaceConnector

    workspace = _workspace_name(workspace_id)
    chosen = {r.kind: r for r in WorkspaceConnector.objects.filter(workspace_id=workspace_id)}
    fallback = defaults()
    out = []
    labels = dict(K.choices)
    for kind in [*labels, *(k for k in kinds.ITEM_KINDS if k not in labels)]:  # the built-in kinds, then the registered
        kind_label = labels.get(kind, kind.replace("_", " "))
        row = chosen.get(kind)
        name, options = (row.connector, dict(row.options)) if row else (fallback[kind], {})
        try:
            found, label = connector(name), connector(name).label
        except ValueError:
            found, label = None, f"{name} (unknown)"
        secrets = tuple((opt, str(options.get(opt) or default)[:100],
                         _is_set(str(options.get(opt) or default), workspace=workspace))
                        for opt, default in (found.secret_options.items() if found else ()))
        shown = tuple((k, _shown(k, v)) for k, v in sorted(options.items()) if not k.lower().endswith("_env"))
        out.append(ConnectorRow(kind=kind, kind_label=kind_label, connector=name, label=label, chosen=row is not None,
                                configured=configured(name, options, workspace=workspace), options=shown, secrets=secrets,
                                choices=tuple((c.name, c.label) for c in sorted(CONNECTORS.values(), key=lambda c: c.name)
                                              if kind in c.kinds)))
    return out
