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

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compensation.drafting import customers, effect_kinds, kinds, templates
from compensation.delivery import gates, grouped_messages, sequencing
from compensation.delivery.approval import content_hash
from core.audit import trail
from core.broker import send
from core.errors import DomainError
from core.vocabulary import AuditAction
from compensation.drafting.netting import PlannedItem
from compensation.drafting.drafts import write_draft
from compensation.models import CompensationItem
from compensation.drafting.transitions import set_status as _set_status
from compensation.drafting.validation import MAX_BODY, validate_draft
from provenance.access import capabilities, tenancy
from provenance import validation
from provenance.llm import get_client
from repairs.models import Incident

K, St = CompensationItem.Kind, CompensationItem.Status
REVIEW_PERMISSION = "compensation.review_compensationitem"


class ReviewRefused(PermissionError):
    """The actor may not make this decision (role, four-eyes)."""


class DecisionRefused(DomainError, ValueError):
    """The item cannot take this decision (already decided, draft invalid, empty reason)."""

    code, status = "decision_refused", 409  # the item's state conflicts


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

def _draft_fields(item: CompensationItem) -> dict:
    return {"to": item.to, "subject": item.subject, "body": item.body, "payment_reference": item.payment_reference,
            "amount_cents": item.amount_cents, "currency": item.currency}


def _refuse(item: CompensationItem, actor, via: str, attempted: str, exc: Exception):
    """Record a refused attempt in its own transaction, then raise it."""
    with transaction.atomic():
        trail.record(action=AuditAction.ITEM_REFUSED, subject_type="compensation_item", subject_id=item.pk, via=via,
                     actor=actor, reason=str(exc), incident_id=item.incident_id, from_status=item.status,
                     workspace=item.incident.workspace_id,
                     to_status=item.status, data={"attempted": attempted, "refusal": type(exc).__name__})
    raise exc


def _require_reviewer(item: CompensationItem, actor, *, via: str, action: str, four_eyes: bool = True) -> bool:
    """Check workspace, role and four-eyes; returns True when four-eyes was relaxed by the setting."""
    tenancy.require_visible(actor, item.incident.workspace_id, via=via, what=f"compensation item {item.pk}")
    if actor is None or not actor.is_active:
        _refuse(item, actor, via, action, ReviewRefused("an active user is required to review"))
    if not capabilities.may(actor, "review"):
        _refuse(item, actor, via, action, ReviewRefused(
            f"user {actor.get_username()!r} may not review compensation items (Reviewer role needed)"))
    if four_eyes and item.incident.flagged_by_id == actor.pk:
        if settings.KINTSUGI_FOUR_EYES:
            _refuse(item, actor, via, action, ReviewRefused(
                f"four-eyes: {actor.get_username()!r} flagged incident #{item.incident_id} and may not "
                f"{action} its items"))
        return True
    return False


def _decide(*, item: CompensationItem, actor, reason: str, via: str, decision: str, edits: dict | None = None,
            policy: int | None = None, shown: str | None = None) -> CompensationItem:
    attempted = {"approve": "approve", "reject": "reject"}[decision] + (" (edited)" if edits else "")
    current = CompensationItem.objects.select_related("incident").get(pk=item.pk)
    relaxed = _require_reviewer(current, actor, via=via, action=decision)
    try:
        with transaction.atomic():
            item = _locked_pending(item.pk, workspace_id=current.incident.workspace_id, refusal="already {status}")
            if not gates.decidable(item.incident):
                # Drafted from the checkpointed plan while the repair was still being applied.
                raise DecisionRefused(f"incident #{item.incident_id} is {item.incident.status}; its items can "
                                      f"be decided once its repair is applied, and execute once its repair is verified")
            if shown is not None and content_hash(item) != shown:
                # Read under the item's lock: an edit or a redraft since the page was shown wins the race.
                raise DecisionRefused(f"item #{item.pk} changed after it was shown to you (its text, subject, "
                                      f"recipient or amount): read it again before deciding")
            drafted = _draft_fields(item)
            if edits:
                _apply_edits(item, edits, actor=actor, via=via, reason=reason)
            if decision == "approve":
                refused_money = sequencing.refused_money(item)
                if refused_money is not None and _draft_fields(item) == drafted:
                    raise DecisionRefused(sequencing.rejection_problem(refused_money))
                problems = validate_draft(kind=item.kind, draft=_draft_fields(item), facts=item.facts)
                if problems or (not item.valid and not edits and refused_money is None):
                    raise DecisionRefused(f"item #{item.pk} failed validation and cannot be approved: "
                                          + "; ".join(problems or item.problems))
                decided_at = timezone.now()
                item.decided_at = decided_at  # waits_for compares it with the money item's decision
                held = sequencing.waits_for(item)
                _set_status(item, St.APPROVED, actor=actor, via=via, action=AuditAction.ITEM_APPROVED, reason=reason,
                            data={"amount_cents": item.amount_cents, "currency": item.currency, "edited": item.edited,
                                  "waits_for": held.pk if held else None, "content_hash": content_hash(item),
                                  **({"policy": policy} if policy else {})},
                            decided_by=actor, decided_at=decided_at, decision_reason=reason,
                            execution_key=f"compensation:{item.pk}", valid=True, problems=[],
                            approved_hash=content_hash(item))
                # A held email is enqueued too: execution skips it until its money item is approved, so a
                # race with that approval still ends with it sent once.
                transaction.on_commit(lambda pk=item.pk: enqueue_execution(pk))
                if item.kind in sequencing.EXPLAINED_KINDS:
                    # Read after commit: an email approved meanwhile is released too (executed once by key).
                    transaction.on_commit(lambda money=item: [enqueue_execution(pk) for pk in sequencing.released_by(money)])
            else:
                _set_status(item, St.REJECTED, actor=actor, via=via, action=AuditAction.ITEM_REJECTED, reason=reason,
                            data={"policy": policy} if policy else None, decided_by=actor,
                            decided_at=timezone.now(), decision_reason=reason)
                _mark_explaining_emails(item, actor=actor, via=via)
            if relaxed:
                trail.record(action=AuditAction.FOUR_EYES_RELAXED, subject_type="compensation_item", subject_id=item.pk,
                             via=via, actor=actor, reason="KINTSUGI_FOUR_EYES is off: the flagger decided an item "
                             "of their own incident", incident_id=item.incident_id, workspace=item.incident.workspace_id,
                             data={"decision": decision, "decision_reason": reason})
    except DecisionRefused as exc:
        _refuse(current, actor, via, attempted, exc)
    return item


def _mark_explaining_emails(money: CompensationItem, *, actor, via: str) -> None:
    """After a money item is rejected: its emails say something that will not happen now. Pending ones
    are marked; approved ones still held are reopened, so none waits for an approval that cannot come."""
    problem = sequencing.rejection_problem(money)
    # A customer's one message about several tickets is written again to say only what happens now.
    rewritten = grouped_messages.rewrite_for(money, actor=actor, via=via, reason=f"{problem.split(':')[0]}: the "
                                             f"customer's message now says that ticket's refund stays as it is")
    for email in (sequencing.explaining_emails(money).select_for_update()
                  .filter(status__in=(St.PENDING, St.APPROVED), executed_at__isnull=True).exclude(pk__in=rewritten)):
        if sequencing.grouped_tickets(email) and not email.edited:
            continue  # kintsugi's own grouped text, already saying what happens: nothing to mark
        fields = dict(valid=False, problems=[*email.problems, problem])
        if email.status == St.APPROVED:
            # Its execution key stays: approved again later, it is still sent at most once.
            _set_status(email, St.PENDING, actor=actor, via=via, action=AuditAction.ITEM_REOPENED, reason=problem,
                        data={"rejected": money.pk, "was_approved_by": email.decided_by.get_username()
                              if email.decided_by else None}, decided_by=None, decided_at=None,
                        decision_reason="", **fields)
            continue
        for name, value in fields.items():
            setattr(email, name, value)
        email.save(update_fields=["valid", "problems", "updated_at"])
        trail.record(action=AuditAction.ITEM_NEEDS_REDRAFT, subject_type="compensation_item", subject_id=email.pk, via=via,
                     actor=actor, reason=problem, incident_id=email.incident_id, from_status=email.status,
                     to_status=email.status, workspace=money.incident.workspace_id, data={"rejected": money.pk})


def _apply_edits(item: CompensationItem, edits: dict, *, actor, via: str, reason: str) -> None:
    allowed = kinds.spec(item.kind).editable
    unknown = sorted(set(edits) - set(allowed))
    if unknown:
        raise DecisionRefused(f"{', '.join(unknown)} cannot be edited on a {item.get_kind_display()}")
    before = _draft_fields(item)
    changed = {}
    for name, value in edits.items():
        if name == "amount_cents":
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise DecisionRefused("amount must be an amount of money, such as 75.00") from None
        if value != getattr(item, name):
            changed[name] = {"before": before[name], "after": value}
            setattr(item, name, value)
    if not changed:
        return
    problems = validate_draft(kind=item.kind, draft=_draft_fields(item), facts=item.facts)
    item.edited, item.valid, item.problems = True, not problems, problems
    item.save()
    trail.record(action=AuditAction.ITEM_EDITED, subject_type="compensation_item", subject_id=item.pk, via=via, actor=actor,
                 reason=reason, incident_id=item.incident_id, from_status=item.status, to_status=item.status,
                 workspace=item.incident.workspace_id, data={"changes": changed, "valid": not problems, "problems": problems})


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
            checked[name] = value  # refused, and recorded, by _apply_edits: not editable on this kind
    return checked


def approve_item(*, item: CompensationItem, actor, reason: str = "", via: str, edits: dict | None = None,
                 policy: int | None = None, shown: str | None = None) -> CompensationItem:
    """Approve a pending, valid draft (optionally after editing it; the edit is recorded). Refused for
    the incident's flagger while four-eyes is on, for users without the Reviewer role, for invalid drafts
    and for items already decided. `shown`: the content hash (compensation.delivery.approval) of the item as the
    approver read it; refused when the item no longer says that. Execution is enqueued after commit."""
    reason = validation.reason(reason, required=False)
    registration = kinds.ITEM_KINDS.get(item.kind)
    if not reason and registration is not None and registration.reason_required:
        raise DecisionRefused(f"say what was done: approving a {item.get_kind_display()} records it")
    reason = reason or "approved"
    return _decide(item=item, actor=actor, reason=reason, via=via, decision="approve", edits=_checked_edits(edits),
                   policy=policy, shown=shown)


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
    """Approve each item in its own transaction: one refusal does not undo the others."""
    result = BulkResult()
    for item in items:
        try:
            result.approved.append(approve_item(item=item, actor=actor, reason=reason, via=via))
        except (PermissionError, ValueError) as exc:
            result.refused.append((item, str(exc)))
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


def enqueue_execution(item_id: int) -> None:
    from compensation.tasks import execute_compensation

    from compensation.delivery.approval import undo_seconds

    # When the broker is down the item stays approved; `execute_approved` picks it up. Sent after the
    # undo window (KINTSUGI_UNDO_SECONDS), so an approval taken back in it sends nothing.
    send(execute_compensation, item_id, what=f"the execution of compensation item {item_id}",
         countdown=undo_seconds() or None)
