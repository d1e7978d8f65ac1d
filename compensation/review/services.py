"""Review of compensation items: decisions (four-eyes), edits, redrafts, bulk approval, cancellation.
Drafting them after a repair is compensation.drafting.drafts.

Every service that changes state takes `actor`, `reason` and `via` (admin, api, cli, mcp, worker) and
writes its audit event in the same transaction (core.audit). Refused attempts (wrong role,
four-eyes, invalid draft, already decided) are recorded in a transaction of their own, so the record
survives the refusal, and then raised: PermissionError / ValueError subclasses, which the CLI turns into
exit code 2 and the admin into an error message.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from compensation.drafting import customers, effect_kinds, kinds, templates
from compensation.review import decisions
from compensation.review.decisions import DecisionRefused, ReviewRefused, enqueue_execution  # noqa: F401 - theirs
from compensation.review.decisions import draft_fields as _draft_fields
from core.audit import trail
from core.vocabulary import AuditAction
from compensation.drafting.netting import PlannedItem
from compensation.drafting.drafts import write_draft
from compensation.models import CompensationItem
from compensation.drafting.transitions import set_status as _set_status
from compensation.drafting.validation import MAX_BODY, validate_draft
from provenance import validation
from provenance.llm import get_client
from repairs.models import Incident

K, St = CompensationItem.Kind, CompensationItem.Status
REVIEW_PERMISSION = "compensation.review_compensationitem"
BULK_CHUNK = 150  # items approved in one transaction by bulk_approve (about decisions.CHUNK_CASES cases)


def _locked_pending(item_pk: int, *, workspace_id: int, refusal: str, with_incident: bool = True) -> CompensationItem:
    """The item, locked for the rest of the transaction after its workspace's audit chain (the order
    every audited transaction takes its locks in); DecisionRefused ("item #N is " + `refusal`, with
    {status} filled in) when it is no longer pending."""
    trail.lock_chain(workspace_id)
    rows = CompensationItem.objects.select_for_update()
    item = (rows.select_related("incident") if with_incident else rows).get(pk=item_pk)
    if item.status != St.PENDING:
        raise DecisionRefused(f"item #{item.pk} is {refusal.format(status=item.status)}")
    return item


def redraft_item(*, item: CompensationItem, actor, reason: str, via: str) -> CompensationItem:
    """Draft a pending item again through the current model client (after a model failure, or with a
    new backend). The same model input is answered from the response cache."""
    reason = validation.reason(reason, required=False) or "redraft"
    if actor is not None:
        # Four-eyes as for a decision: a redraft chooses the words the second person is asked to approve,
        # so the one who flagged the incident does not write them either (the system's own redraft after
        # a model failure has no actor).
        _require_reviewer(item, actor, via=via, action="redraft")
    refreshed = CompensationItem.objects.select_related("incident").get(pk=item.pk)
    if refreshed.status != St.PENDING:
        _refuse(refreshed, actor, via, "redraft", DecisionRefused(f"item #{item.pk} is {refreshed.status}; only pending items are redrafted"))
    # A ticket that appeared since the item was drafted: the new draft is written for its customer.
    ticket_found = customers.refreshed(refreshed.facts, workspace_id=refreshed.incident.workspace_id,
                                       ticket_id=refreshed.ticket_id)
    if ticket_found is not None:
        refreshed.facts = ticket_found
    planned = PlannedItem(refreshed.kind, refreshed.ticket_id,
                          refreshed.facts.get("max_cents") or refreshed.facts.get("effect_cents") or 0,
                          refreshed.facts.get("currency", "USD"), refreshed.original, refreshed.facts.get("situation", ""),
                          {k: refreshed.facts.get(k) for k in ("refunded_cents", "replacement_cents", "reverse_cents", "netted")})
    own, template_version = templates.current(workspace_id=refreshed.incident.workspace_id)
    draft, drafted_by, version, problems = write_draft(planned, refreshed.facts,
                                                       workspace=refreshed.incident.workspace.name,
                                                       kinds=effect_kinds.kinds_of(refreshed.incident.workspace_id),
                                                       template=(own, template_version) if template_version else None)
    get_client().flush()
    with transaction.atomic():
        item = _locked_pending(item.pk, workspace_id=refreshed.incident.workspace_id, with_incident=False,
                               refusal="{status}; only pending items are redrafted")
        facts_before = item.facts
        if ticket_found is not None:
            item.facts, item.customer_email = ticket_found, ticket_found["customer_email"]
        problems = problems or validate_draft(kind=item.kind, draft=draft, facts=item.facts)
        before = _draft_fields(item)
        for name in ("to", "subject", "body", "payment_reference", "amount_cents", "currency"):
            setattr(item, name, draft[name])
        item.drafted_by, item.prompt_version, item.valid, item.problems, item.edited = drafted_by, version, not problems, problems, False
        item.save()
        trail.record(action=AuditAction.ITEM_REDRAFTED, subject_type="compensation_item", subject_id=item.pk, via=via,
                     actor=actor, reason=reason, incident_id=item.incident_id, from_status=item.status,
                     workspace=refreshed.incident.workspace_id,
                     to_status=item.status, data={"before": before, "after": _draft_fields(item), "valid": item.valid,
                                                  "problems": problems, "drafted_by": drafted_by,
                                                  **({"ticket_found": item.ticket_id,
                                                      "customer_before": facts_before.get("customer_email", "")}
                                                     if ticket_found is not None else {})})
    return item


def set_customer(*, item: CompensationItem, name: str, email: str, actor, reason: str, via: str) -> CompensationItem:
    """Name the customer of a pending email whose ticket is not in the workspace, then draft it again for
    them. Money items wait for the ticket itself (its payment reference); four-eyes applies, since the
    customer is whom the email goes to."""
    reason = validation.reason(reason, field="reason")
    email = validation.email(email, field="customer email")
    name = validation.text(name, field="customer name", max_length=200).strip()
    current = CompensationItem.objects.select_related("incident").get(pk=item.pk)
    _require_reviewer(current, actor, via=via, action="set customer")
    try:
        with transaction.atomic():
            item = _locked_pending(item.pk, workspace_id=current.incident.workspace_id,
                                   refusal="{status}; only a pending item's customer is set")
            if not item.facts.get("ticket_missing"):
                raise DecisionRefused(f"item #{item.pk} has its ticket {item.ticket_id}: the customer is the ticket's")
            if item.moves_money:
                raise DecisionRefused(f"item #{item.pk} moves money: add ticket {item.ticket_id} (its payment "
                                      f"reference is needed), then draft again")
            before = {"customer": item.facts.get("customer", ""), "customer_email": item.customer_email}
            item.facts = {**item.facts, "customer": name, "customer_email": email, "customer_set_by": actor.get_username()}
            item.customer_email = email
            item.save(update_fields=["facts", "customer_email", "updated_at"])
            trail.record(action=AuditAction.ITEM_CUSTOMER_SET, subject_type="compensation_item", subject_id=item.pk, via=via,
                         actor=actor, reason=reason, incident_id=item.incident_id, from_status=item.status,
                         to_status=item.status, workspace=item.incident.workspace_id,
                         data={"before": before, "after": {"customer": name, "customer_email": email}})
    except DecisionRefused as exc:
        _refuse(current, actor, via, "set customer", exc)
    return redraft_item(item=item, actor=actor, reason=f"drafted again for the customer named: {reason}", via=via)


# --- review -----------------------------------------------------------------------------------------

def _refuse(item: CompensationItem, actor, via: str, attempted: str, exc: Exception):
    """Record a refused attempt in its own transaction, then raise it."""
    with transaction.atomic():
        trail.record(**decisions.refusal_event(item, actor=actor, via=via, attempted=attempted, exc=exc))
    raise exc


def _require_reviewer(item: CompensationItem, actor, *, via: str, action: str, four_eyes: bool = True) -> bool:
    """Check workspace, role and four-eyes; returns True when four-eyes was relaxed by the setting."""
    refusal, relaxed = decisions.reviewer_refusal(item, actor, via=via, action=action, four_eyes=four_eyes)
    if refusal is not None:
        _refuse(item, actor, via, action, refusal)
    return relaxed


def _decide(*, item: CompensationItem, actor, reason: str, via: str, decision: str, edits: dict | None = None,
            policy: int | None = None, shown: str | None = None) -> CompensationItem:
    """One item through compensation.review.decisions (a batch of one): its refusal, recorded there, raised here."""
    outcome = decisions.decide(asked=[decisions.Asked(item, shown=shown, edits=edits)], decision=decision,
                               actor=actor, reason=reason, via=via, policy=policy)
    if outcome.refused:
        raise outcome.refused[0][1]
    return outcome.decided[0]


# What an edit may hold before the draft checks look at it: the columns' bounds, no NUL or other control
# characters (Postgres refuses NUL in text; the others have no business in an email or a note).
_EDIT_BOUNDS = {"to": 320, "subject": 300, "body": 20 * MAX_BODY}


def _checked_edits(edits: dict | None) -> dict | None:
    """The edits with amount_cents as an int; InvalidInput (nothing recorded: the input never got in) for
    a value no column could hold. Whether the edited draft may be approved is validate_draft's call."""
    if not edits:
        return edits
    checked = {}
    for name, value in edits.items():
        if name == "amount_cents":
            checked[name] = validation.parse_amount_cents(value, field="amount")
        elif name in _EDIT_BOUNDS:
            checked[name] = validation.text(value, field=name, max_length=_EDIT_BOUNDS[name])
        else:
            checked[name] = value  # refused, and recorded, by the decision: not editable on this kind
    return checked


def approve_item(*, item: CompensationItem, actor, reason: str = "", via: str, edits: dict | None = None,
                 policy: int | None = None, shown: str | None = None) -> CompensationItem:
    """Approve a pending, valid draft (optionally after editing it; the edit is recorded). Refused for
    the incident's flagger while four-eyes is on, for users without the Reviewer role, for invalid drafts
    and for items already decided. `shown`: the content hash (compensation.delivery.approval) of the item as the
    approver read it; refused when the item no longer says that. Execution is enqueued after commit."""
    reason = validation.reason(reason, required=False)
    if problem := unreasoned_approval(item, reason):
        raise problem
    reason = reason or "approved"
    return _decide(item=item, actor=actor, reason=reason, via=via, decision="approve", edits=_checked_edits(edits),
                   policy=policy, shown=shown)


def unreasoned_approval(item: CompensationItem, reason: str) -> DecisionRefused | None:
    """The refusal of an approval without a reason of an item whose kind records what a person did
    (nothing recorded: the decision never started)."""
    registration = kinds.ITEM_KINDS.get(item.kind)
    if not reason and registration is not None and registration.reason_required:
        return DecisionRefused(f"say what was done: approving a {item.get_kind_display()} records it")
    return None


def reject_item(*, item: CompensationItem, actor, reason: str, via: str, policy: int | None = None) -> CompensationItem:
    """Reject a pending draft; a reason is required."""
    reason = validation.reason(reason, required=False)
    if not reason:
        raise DecisionRefused("a reason is required to reject an item")
    return _decide(item=item, actor=actor, reason=reason, via=via, decision="reject", policy=policy)


@dataclass
class BulkResult:
    approved: list[CompensationItem] = field(default_factory=list)
    refused: list[tuple[CompensationItem, str]] = field(default_factory=list)


def bulk_approve(*, items, actor, reason: str, via: str) -> BulkResult:
    """Approve the items, BULK_CHUNK per transaction (compensation.review.decisions): one refusal does not
    undo the others."""
    reason = validation.reason(reason, required=False)
    result, asked = BulkResult(), []
    for item in items:
        if problem := unreasoned_approval(item, reason):
            result.refused.append((item, str(problem)))
        else:
            asked.append(decisions.Asked(item))
    for start in range(0, len(asked), BULK_CHUNK):
        outcome = decisions.decide(asked=asked[start:start + BULK_CHUNK], decision="approve", actor=actor,
                                   reason=reason or "approved", via=via)
        result.approved += outcome.decided
        result.refused += [(item, str(exc)) for item, exc in outcome.refused]
    return result


def cancel_incident_items(*, incident: Incident, actor, reason: str, via: str) -> int:
    """Cancel an incident's pending items (the incident was closed); decided items keep their state."""
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)
        # Without the incident's plan (megabytes of JSON on a large repair), or it comes once per item.
        pending = list(CompensationItem.objects.select_for_update(of=("self",)).select_related("incident")
                       .defer("incident__plan")
                       .filter(incident=incident, status=St.PENDING))
        for item in pending:
            _set_status(item, St.CANCELLED, actor=actor, via=via, action=AuditAction.ITEM_CANCELLED,
                        reason=f"incident #{incident.pk} closed: {reason}")
    return len(pending)
