"""Review policies: a small rule that decides many pending items of one incident, with four eyes on the
rule itself.

The rule language: clauses joined by "," or "AND", each `field op value`, parsed by a regular expression
into a database filter (never evaluated):
- `kind=correction_email` (also `!=`): the item's kind;
- `amount<5000` (`<`, `<=`, `>`, `>=`, `=`, `!=`): the money the item moves, in cents like every amount
  kintsugi exchanges ("$50.00" is read as money: 5000);
- `validated=true` / `false`: whether the draft passed its checks;
- `ticket=t05` (also `!=`).
Only pending items are ever matched.

One person proposes a rule (its preview, the exact items it matches, is stored); another applies it.
Applying decides exactly the previewed items that are still pending and still match, each through
approve_item / reject_item as the applier (role, four-eyes, validation and the audit record stay
theirs; each decision's event names the policy), and only items the author could have decided by hand.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from compensation.drafting import kinds
from compensation.review import services
from core.audit import trail
from core.vocabulary import AuditAction
from compensation.models import CompensationItem, ReviewPolicy
from core.money import parse_money
from provenance.access import tenancy

K, St = CompensationItem.Kind, CompensationItem.Status
CLAUSE = re.compile(r"^\s*(kind|amount|validated|ticket)\s*(<=|>=|!=|=|<|>)\s*([A-Za-z0-9_$.,\-]+)\s*$")
SPLIT = re.compile(r",|\bAND\b", re.IGNORECASE)
LOOKUPS = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte", "=": "exact"}
MAX_RULE = 500


class RuleError(ValueError):
    """A rule that is not one of the language's (named in the message; nothing was decided)."""


class PolicyRefused(PermissionError):
    pass


def _clause(text: str) -> Q:
    m = CLAUSE.match(text)
    if not m:
        raise RuleError(f"cannot read {text.strip()!r}: write field op value, e.g. kind=correction_email, "
                        "amount<5000, validated=true")
    name, op, value = m.groups()
    if name == "kind":
        if value not in K.values or op not in ("=", "!="):
            raise RuleError(f"kind takes = or != and one of {', '.join(K.values)}")
        q = Q(kind=value)
    elif name == "ticket":
        if op not in ("=", "!="):
            raise RuleError("ticket takes = or !=")
        q = Q(ticket_id=value)
    elif name == "validated":
        if value.lower() not in ("true", "false") or op not in ("=", "!="):
            raise RuleError("validated takes =true or =false")
        q = Q(valid=value.lower() == "true")
    else:
        cents = int(value) if value.isdigit() else parse_money(value) if value.startswith("$") else None
        if cents is None:
            raise RuleError(f"amount {value!r} is not an amount: cents (5000) or money ($50.00)")
        q = Q(**{f"amount_cents__{LOOKUPS.get(op, 'exact')}": cents})
    return ~q if op == "!=" else q


def parse(rule: str) -> Q:
    """The rule as a filter; RuleError for anything outside the language."""
    if not rule or not rule.strip():
        raise RuleError("the rule is empty")
    if len(rule) > MAX_RULE:
        raise RuleError(f"the rule is longer than {MAX_RULE} characters")
    q = Q()
    for part in SPLIT.split(rule):
        q &= _clause(part)
    return q


def matching(*, incident, rule: str):
    return CompensationItem.objects.filter(incident=incident, status=St.PENDING).filter(parse(rule))


@dataclass
class Preview:
    cases: int
    items: int
    amount_cents: int
    item_ids: list[int]

    def as_dict(self) -> dict:
        return {"cases": self.cases, "items": self.items, "amount_cents": self.amount_cents}


def preview(*, incident, rule: str) -> Preview:
    """What the rule would decide now: cases, items and the money they move."""
    found = matching(incident=incident, rule=rule)
    agg = found.aggregate(items=Count("id"), cases=Count("ticket_id", distinct=True),
                          cents=Coalesce(Sum("amount_cents", filter=Q(kind__in=kinds.MONEY)), 0))
    return Preview(cases=agg["cases"], items=agg["items"], amount_cents=agg["cents"],
                   item_ids=list(found.order_by("pk").values_list("pk", flat=True)))


def _may_decide_by_hand(user, incident) -> str | None:
    """Why `user` could not decide this incident's items by hand (None: they could)."""
    if user is None or not user.is_active or not user.has_perm(services.REVIEW_PERMISSION):
        return "not an active Reviewer"
    if not tenancy.may_see(user, incident.workspace_id):
        return "not a member of the incident's workspace"
    if incident.flagged_by_id == user.pk:
        return f"{user.get_username()!r} flagged incident #{incident.pk} (four-eyes)"
    return None


def propose(*, incident, rule: str, decision: str, actor, reason: str, via: str) -> ReviewPolicy:
    """Store the rule with the items its preview matches, audited; nothing is decided."""
    if decision not in ReviewPolicy.Decision.values:
        raise RuleError(f"unknown decision {decision!r}")
    if not (reason or "").strip():
        raise RuleError("a reason is required to propose a policy")
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"incident {incident.pk}")
    if why := _may_decide_by_hand(actor, incident):
        raise PolicyRefused(f"the author may not decide these items by hand: {why}")
    found = preview(incident=incident, rule=rule)
    with transaction.atomic():
        policy = ReviewPolicy.objects.create(incident=incident, rule=rule, decision=decision, reason=reason,
                                             author=actor, previewed=found.item_ids)
        trail.record(action=AuditAction.POLICY_PROPOSED, subject_type="review_policy", subject_id=policy.pk, via=via,
                     actor=actor, reason=reason, incident_id=incident.pk, workspace=incident.workspace_id,
                     data={"rule": rule, "decision": decision, **found.as_dict()})
    return policy


def apply(*, policy: ReviewPolicy, actor, reason: str, via: str) -> dict:
    """Decide the policy's previewed items (still pending, still matching) as `actor`, a second person."""
    incident = policy.incident
    tenancy.require_visible(actor, incident.workspace_id, via=via, what=f"review policy {policy.pk}")
    if not (reason or "").strip():
        raise RuleError("a reason is required to apply a policy")
    with transaction.atomic():
        locked = ReviewPolicy.objects.select_for_update().get(pk=policy.pk)
        if locked.applied_at is not None:
            raise PolicyRefused(f"policy #{policy.pk} was already applied")
        if locked.author_id == actor.pk:
            raise PolicyRefused("four-eyes: the author of a policy may not apply it")
        for who, user in (("author", locked.author), ("applier", actor)):
            if why := _may_decide_by_hand(user, incident):
                raise PolicyRefused(f"the {who} may not decide these items by hand: {why}")
        locked.applier, locked.applied_at = actor, timezone.now()
        locked.save(update_fields=["applier", "applied_at"])
    still = set(matching(incident=incident, rule=locked.rule).filter(pk__in=locked.previewed).values_list("pk", flat=True))
    decided, refused = [], []
    decide = services.approve_item if locked.decision == "approve" else services.reject_item
    for item in CompensationItem.objects.filter(pk__in=sorted(still)).select_related("incident"):
        try:
            decide(item=item, actor=actor, reason=f"policy #{locked.pk}: {reason}", via=via, policy=locked.pk)
            decided.append(item.pk)
        except (PermissionError, ValueError) as exc:
            refused.append({"item": item.pk, "why": str(exc)})
    outcome = {"decided": len(decided), "refusals": refused, "skipped": len(locked.previewed) - len(still),
               "decision": locked.decision}
    with transaction.atomic():
        ReviewPolicy.objects.filter(pk=locked.pk).update(outcome=outcome)
        trail.record(action=AuditAction.POLICY_APPLIED, subject_type="review_policy", subject_id=locked.pk, via=via, actor=actor,
                     reason=reason, incident_id=incident.pk, workspace=incident.workspace_id,
                     data={"rule": locked.rule, **outcome, "refusals": len(refused)})
    return outcome
