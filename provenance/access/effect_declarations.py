"""Effect kinds declared by a workspace's own agents, over the API: a kind kintsugi does not know
(`send_money`, `transfer`, `send_direct_message`) says where its money is, what it acts on and how a
repair compensates it, so it is money on every page and nets like a refund instead of reaching a
reviewer as an unexplained $0.00.

Who may declare: a Workspace admin of the workspace, or a recording token of it (the agent's side
declares its own kinds before recording them). Every declaration (and every change of one) is one
audit event in the workspace's chain, in the same transaction. The built-in kinds (`refund`,
`email`) cannot be redeclared. What a declaration means for the review items is
compensation.drafting.effect_kinds' answer; docs/effect-kinds.md says it for people.
"""
from __future__ import annotations

import re

from django.db import transaction

from core.audit import trail
from core.vocabulary import AuditAction
from provenance.access import tenancy
from provenance import validation
from provenance.agents import NAME_PATTERN
from provenance.models import AgentToken, EffectKindDeclaration, Workspace
from provenance.access.onboarding import MANAGE_AGENTS, OnboardingRefused

BUILT_IN = ("refund", "email")
Compensation = EffectKindDeclaration.Compensation
# A message kind carries what its correction is drafted from, exactly as an email does.
MESSAGE_DETAILS = ("to", "subject", "body")
_DETAIL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class DeclarationRefused(OnboardingRefused):
    """A declaration the actor may not make (another workspace's token, no Workspace admin role)."""


def _checked(*, name, money, target, compensation, decides) -> dict:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise validation.InvalidInput(f"name: an effect kind matches {NAME_PATTERN.pattern}")
    if name in BUILT_IN:
        raise validation.InvalidInput(f"name: {name!r} is built in; declare a kind of your own")
    if not isinstance(money, bool):
        raise validation.InvalidInput("money: true or false")
    if compensation not in Compensation.values:
        raise validation.InvalidInput(f"compensation: one of {', '.join(Compensation.values)}")
    if compensation == Compensation.REVERSED and not money:
        raise validation.InvalidInput("compensation: only a money kind is reversed like a refund (money: true)")
    if compensation == Compensation.MESSAGE and money:
        raise validation.InvalidInput("compensation: a message moves no money (money: false)")
    target = target or ""
    if not isinstance(target, str) or (target and not _DETAIL_KEY.match(target)):
        raise validation.InvalidInput("target: a details key (letters, digits, underscores)")
    if target in ("kind", "amount", "ticket", "currency"):
        raise validation.InvalidInput(f"target: {target!r} is a field of every effect, not a details key")
    decides = validation.text(decides or "", field="decides", max_length=200).strip()
    return {"money": money, "target": target, "compensation": compensation, "decides": decides}


def declare_effect_kind(*, workspace: Workspace, name: str, money: bool, compensation: str, target: str = "",
                        decides: str = "", actor, token: AgentToken | None = None, reason: str,
                        via: str) -> tuple[EffectKindDeclaration, bool]:
    """Declare (or change) how `workspace`'s effect kind `name` is compensated. `token`: the recording
    token the agent's side declared with (then `actor` is its principal); else `actor` must be the
    workspace's Workspace admin. Returns (declaration, created)."""
    if token is not None:
        if token.workspace_id != workspace.pk:
            raise tenancy.NotVisible(f"no workspace {workspace.name!r}")
        declared_by = f"agent-token:{token.prefix}"
    else:
        tenancy.require_visible(actor, workspace, via=via, what=f"workspace {workspace.name!r}")
        if actor is None or not actor.is_active or not (actor.is_superuser or actor.has_perm(MANAGE_AGENTS)):
            raise DeclarationRefused(f"user {getattr(actor, 'username', None)!r} may not declare effect kinds in "
                                     f"workspace {workspace.name!r} (its Workspace admin or a recording token needed)")
        declared_by = actor.get_username()
    fields = _checked(name=name, money=money, target=target, compensation=compensation, decides=decides)
    reason = validation.text(reason or "", field="reason", max_length=2000).strip()
    if not reason:
        raise validation.InvalidInput("reason: say why the kind is declared")
    with transaction.atomic():
        trail.lock_chain(workspace.pk)
        row = EffectKindDeclaration.objects.select_for_update().filter(workspace=workspace, name=name).first()
        before = None if row is None else {k: getattr(row, k) for k in fields}
        created = row is None
        row = row or EffectKindDeclaration(workspace=workspace, name=name)
        for k, v in fields.items():
            setattr(row, k, v)
        row.declared_by = declared_by
        row.save()
        trail.record(action=AuditAction.EFFECT_KIND_DECLARED, subject_type="effect_kind", subject_id=row.pk, via=via,
                     actor=actor, reason=reason, workspace=workspace,
                     data={"name": name, **fields, "declared_by": declared_by, "before": before})
    return row, created


def declarations(workspace_id: int) -> dict[str, EffectKindDeclaration]:
    """The workspace's declared kinds by name."""
    return {d.name: d for d in EffectKindDeclaration.objects.filter(workspace_id=workspace_id)}


def _needs(row: EffectKindDeclaration) -> tuple[str, ...]:
    needs = MESSAGE_DETAILS if row.compensation == Compensation.MESSAGE else ()
    return needs + ((row.target,) if row.target and row.target not in needs else ())


def required_details(workspace: str, kind: str) -> tuple[str, ...]:
    """The details keys an effect of `kind` must carry as strings when recorded in `workspace` (by name):
    a message kind's to/subject/body, a declared target."""
    row = EffectKindDeclaration.objects.filter(workspace__name=workspace, name=kind).first()
    return () if row is None else _needs(row)


def required_details_of(workspace: str) -> dict[str, tuple[str, ...]]:
    """required_details of every kind `workspace` declared, read at once: for a replay, whose calls are
    answered on threads that must not open database connections of their own (provenance.recording.replay)."""
    return {row.name: _needs(row) for row in EffectKindDeclaration.objects.filter(workspace__name=workspace)}
