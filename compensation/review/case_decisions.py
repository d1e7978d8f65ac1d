"""Deciding a case as a whole, or many cases at once: every pending item through compensation.review.decisions,
in the order they leave.

A case's items (and a selection's cases, CHUNK_CASES at a time) are decided in one short transaction:
the Reviewer role, four-eyes, validation and the audit record are the decision engine's, the same checks
an item decided alone meets, and a refusal is known before anything is written, so one refusal does not
undo the others. Money items are decided before the emails that explain them: approving the reversal
first lets its email go straight out instead of waiting; rejecting it first marks the email before the
reviewer's reason rejects it too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compensation.delivery import approval, messages

from compensation.review import decisions, services
from compensation.review.cases import Case
from compensation.models import CompensationItem
from provenance import validation


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
    _check_decision(decision, reason)
    if decision == "approve":
        check_shown([c.item for c in case.pending], shown)
    return decide_cases(cases=[case], actor=actor, decision=decision, reason=reason, via=via,
                        shown=shown is not None)[0]


def decide_cases(*, cases: list[Case], actor, decision: str, reason: str, via: str,
                 shown: bool = False) -> list[CaseDecision]:
    """decide_case for each of `cases` (their digests checked by the caller), CHUNK_CASES cases per
    transaction; one CaseDecision per case, in order. `shown`: bind each approval to the item's content
    as the cases were built (what the page showed)."""
    _check_decision(decision, reason)
    reason = validation.reason(reason, required=False)  # InvalidInput for one no item could take
    results = []
    for start in range(0, len(cases), decisions.CHUNK_CASES):
        chunk = cases[start:start + decisions.CHUNK_CASES]
        asked, refused = [], {}
        for entry in (entry for case in chunk for entry in case.pending):  # each case's in leaving order
            problem = services.unreasoned_approval(entry.item, reason) if decision == "approve" else None
            if problem is not None:
                refused[entry.item.pk] = str(problem)
            else:
                asked.append(decisions.Asked(entry.item, shown=approval.content_hash(entry.item) if shown else None))
        outcome = decisions.decide(asked=asked, decision=decision, actor=actor, reason=reason or "approved",
                                   via=via)
        decided = {i.pk: i for i in outcome.decided}
        refused.update({i.pk: str(exc) for i, exc in outcome.refused})
        for case in chunk:
            result = CaseDecision()
            for entry in case.pending:
                if entry.item.pk in decided:
                    result.decided.append(decided[entry.item.pk])
                else:
                    result.refused.append((entry.item, refused[entry.item.pk]))
            results.append(result)
    return results


def _check_decision(decision: str, reason: str) -> None:
    if decision not in ("approve", "reject"):
        raise services.DecisionRefused(f"unknown decision {decision!r}")
    if decision == "reject" and not (reason or "").strip():
        raise services.DecisionRefused("a reason is required to reject a case")


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
