"""Deciding a case as a whole: every pending item through compensation.review.services, in the order they leave.

Each item is decided by approve_item / reject_item in its own transaction (four-eyes, the Reviewer role,
validation and the audit record stay theirs), so one refusal does not undo the others. Money items are
decided before the emails that explain them: approving the reversal first lets its email go straight
out instead of waiting; rejecting it first marks the email before the reviewer's reason rejects it too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compensation.delivery import approval, messages

from compensation.review import services
from compensation.review.cases import Case
from compensation.models import CompensationItem



@dataclass
class CaseDecision:
    decided: list[CompensationItem] = field(default_factory=list)
    refused: list[tuple[CompensationItem, str]] = field(default_factory=list)


class ContentChanged(services.DecisionRefused):
    """What the person was shown is not what the items say now."""


def check_shown(items, shown: str | None) -> None:
    """Refuse when `shown` (compensation.delivery.messages.shown_digest of the page) is given and `items` no
    longer match it."""
    if shown is not None and messages.shown_digest(items) != shown:
        raise ContentChanged("what you were shown has changed since (an item was edited, drafted again or "
                             "decided by someone else): read it again before deciding")


def decide_case(*, case: Case, actor, decision: str, reason: str, via: str, shown: str | None = None) -> CaseDecision:
    """Approve (decision "approve") or reject ("reject", a reason required) every pending item of
    `case`. An email whose money item was rejected is not approved with the rest: it is left pending
    for the reviewer to reject or edit, and reported as refused. `shown`: the digest of the pending
    items as the page showed them; an approval is refused as a whole when they changed since, and each
    item is approved bound to the content that was shown."""
    if decision not in ("approve", "reject"):
        raise services.DecisionRefused(f"unknown decision {decision!r}")
    if decision == "reject" and not (reason or "").strip():
        raise services.DecisionRefused("a reason is required to reject a case")
    if decision == "approve":
        check_shown([c.item for c in case.pending], shown)
    result = CaseDecision()
    for entry in case.pending:  # already in leaving order (each kind's spec gives its order)
        try:
            if decision == "approve":
                done = services.approve_item(item=entry.item, actor=actor, reason=reason, via=via,
                                             shown=approval.content_hash(entry.item) if shown is not None else None)
            else:
                done = services.reject_item(item=entry.item, actor=actor, reason=reason, via=via)
            result.decided.append(done)
        except (PermissionError, ValueError) as exc:
            result.refused.append((entry.item, str(exc)))
    return result


def decide_case_item(*, case: Case, item_id: int, actor, decision: str, reason: str, via: str,
                     shown: str | None = None) -> CompensationItem:
    """Approve or reject one item of `case` (an item of another case is refused as not in it). `shown`:
    the item's content hash as the page showed it (an approval is bound to it)."""
    entry = next((c for c in case.items if c.item.pk == item_id), None)
    if entry is None:
        raise services.DecisionRefused(f"item #{item_id} is not part of this case")
    if decision == "approve":
        return services.approve_item(item=entry.item, actor=actor, reason=reason, via=via, shown=shown)
    if decision == "reject":
        return services.reject_item(item=entry.item, actor=actor, reason=reason, via=via)
    if decision == "undo":
        return approval.undo(item=entry.item, actor=actor, reason=reason or "undone", via=via)
    raise services.DecisionRefused(f"unknown decision {decision!r}")
