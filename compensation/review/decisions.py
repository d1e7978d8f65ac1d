"""Deciding compensation items, one or many at once: the checks of a decision (the Reviewer role, four-eyes,
the incident's gate, what was shown, the ticket's sequencing, validation) and its writes.

Every change to a workspace's items is audited in the workspace's one hash chain, and appends to a chain
are serialised by its lock (core.audit.trail.lock_chain), which a transaction holds until it commits. So
what a decision does under that lock is what another reviewer of the workspace waits for. Here it is one
short transaction per batch: whatever can be read before the lock is read before it (the items and their
incidents, without the repair's plan; the person's role, membership and four-eyes); then, the chain's lock
taken first as in every audited transaction, the items of the batch's tickets are locked in one query,
every check is made on them in memory in the order given (a case's money item before the emails that
explain it, so an email sees the decision on its money item just made), the rows that changed are written
in one UPDATE and every audit event is appended in one COPY (core.audit.trail.record_many); the chain's
order is the commit order, as before. A refusal is known before anything is written: it is recorded in the
same transaction and does not undo the batch's other decisions. decide_cases() splits a long selection into
batches of CHUNK_CASES cases, one transaction each, so another reviewer gets the lock between them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compensation.delivery import gates, grouped_messages, sequencing
from compensation.delivery.approval import content_hash
from compensation.drafting import kinds
from compensation.drafting.transitions import set_status
from compensation.drafting.validation import validate_draft
from compensation.models import CompensationItem
from core.audit import trail
from core.broker import send
from core.bulk import update_rows
from core.errors import DomainError
from core.vocabulary import AuditAction
from provenance.access import capabilities, tenancy

St = CompensationItem.Status
CHUNK_CASES = 50  # cases decided in one transaction (a "Give me the next N" batch)
DRAFT_FIELDS = ("to", "subject", "body", "payment_reference", "amount_cents", "currency")


class ReviewRefused(PermissionError):
    """The actor may not make this decision (role, four-eyes)."""


class DecisionRefused(DomainError, ValueError):
    """The item cannot take this decision (already decided, draft invalid, empty reason)."""

    code, status = "decision_refused", 409  # the item's state conflicts


@dataclass
class Asked:
    """One item to decide: `shown`, the content hash the person read (an approval is bound to it);
    `edits`, the fields they changed before approving."""
    item: CompensationItem
    shown: str | None = None
    edits: dict | None = None


@dataclass
class Outcome:
    decided: list[CompensationItem] = field(default_factory=list)
    refused: list[tuple[CompensationItem, Exception]] = field(default_factory=list)


def draft_fields(item: CompensationItem) -> dict:
    return {name: getattr(item, name) for name in DRAFT_FIELDS}


def reviewer_refusal(item: CompensationItem, actor, *, via: str, action: str,
                     four_eyes: bool = True) -> tuple[ReviewRefused | None, bool]:
    """Why `actor` may not `action` `item` (None: they may), and whether four-eyes was relaxed by the
    setting for it. NotVisible (another workspace's item) is raised, as a missing item would be."""
    tenancy.require_visible(actor, item.incident.workspace_id, via=via, what=f"compensation item {item.pk}")
    if actor is None or not actor.is_active:
        return ReviewRefused("an active user is required to review"), False
    if not capabilities.may(actor, "review"):
        return ReviewRefused(f"user {actor.get_username()!r} may not review compensation items (Reviewer role "
                             f"needed)"), False
    if four_eyes and item.incident.flagged_by_id == actor.pk:
        if settings.KINTSUGI_FOUR_EYES:
            return ReviewRefused(f"four-eyes: {actor.get_username()!r} flagged incident #{item.incident_id} and may "
                                 f"not {action} its items"), False
        return None, True
    return None, False


def refusal_event(item: CompensationItem, *, actor, via: str, attempted: str, exc: Exception) -> dict:
    """The audit event of a refused attempt (recorded; then the refusal is raised or reported)."""
    return dict(action=AuditAction.ITEM_REFUSED, subject_type="compensation_item", subject_id=item.pk, via=via,
                actor=actor, reason=str(exc), incident_id=item.incident_id, from_status=item.status,
                workspace=item.incident.workspace_id, to_status=item.status,
                data={"attempted": attempted, "refusal": type(exc).__name__})


def _event(item: CompensationItem, action: str, *, actor, via: str, reason: str, before: str, data=None) -> dict:
    return dict(action=action, subject_type="compensation_item", subject_id=item.pk, via=via, actor=actor,
                reason=reason, incident_id=item.incident_id, from_status=before, to_status=item.status,
                data=data or {}, workspace=item.incident.workspace_id)


class _Batch:
    """The locked items of a batch's tickets and what deciding them changed: the events to append, the rows
    to write, what to do after the commit."""

    def __init__(self, locked: list[CompensationItem], *, actor, via: str, reason: str):
        self.actor, self.via, self.reason = actor, via, reason
        self.by_pk = {i.pk: i for i in locked}
        self.tickets: dict[tuple[int, str], list[CompensationItem]] = {}
        for item in locked:
            self.tickets.setdefault((item.incident_id, item.ticket_id), []).append(item)
        self.events: list[dict] = []
        self.changed: dict[int, CompensationItem] = {}
        self.after_commit: list = []
        self.rejected_money: list[CompensationItem] = []  # whose customers' one messages are written again
        self.edited = False  # an edit changed a draft: its fields are written too

    def siblings(self, item: CompensationItem) -> list[CompensationItem]:
        return self.tickets[(item.incident_id, item.ticket_id)]

    def set_status(self, item: CompensationItem, to: str, *, action: str, reason: str, data=None, **fields) -> None:
        before = item.status
        item.status = to
        for name, value in fields.items():
            setattr(item, name, value)
        self.changed[item.pk] = item
        self.events.append(_event(item, action, actor=self.actor, via=self.via, reason=reason, before=before, data=data))

    def apply_edits(self, item: CompensationItem, edits: dict) -> None:
        allowed = kinds.spec(item.kind).editable
        unknown = sorted(set(edits) - set(allowed))
        if unknown:
            raise DecisionRefused(f"{', '.join(unknown)} cannot be edited on a {item.get_kind_display()}")
        before, changed = draft_fields(item), {}
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
        problems = validate_draft(kind=item.kind, draft=draft_fields(item), facts=item.facts)
        item.edited, item.valid, item.problems = True, not problems, problems
        self.changed[item.pk], self.edited = item, True
        self.events.append(_event(item, AuditAction.ITEM_EDITED, actor=self.actor, via=self.via, reason=self.reason,
                                  before=item.status, data={"changes": changed, "valid": not problems,
                                                            "problems": problems}))

    def approve(self, item: CompensationItem, *, drafted: dict, edited: bool, policy: int | None) -> None:
        refused_money = sequencing.refused_money(item, siblings=self.siblings(item))
        if refused_money is not None and draft_fields(item) == drafted:
            raise DecisionRefused(sequencing.rejection_problem(refused_money))
        problems = validate_draft(kind=item.kind, draft=draft_fields(item), facts=item.facts)
        if problems or (not item.valid and not edited and refused_money is None):
            raise DecisionRefused(f"item #{item.pk} failed validation and cannot be approved: "
                                  + "; ".join(problems or item.problems))
        decided_at = timezone.now()
        item.decided_at = decided_at  # waits_for compares it with the money item's decision
        held = sequencing.waits_for(item, siblings=self.siblings(item))
        self.set_status(item, St.APPROVED, action=AuditAction.ITEM_APPROVED, reason=self.reason,
                        data={"amount_cents": item.amount_cents, "currency": item.currency, "edited": item.edited,
                              "waits_for": held.pk if held else None, "content_hash": content_hash(item),
                              **({"policy": policy} if policy else {})},
                        decided_by=self.actor, decided_at=decided_at, decision_reason=self.reason,
                        execution_key=f"compensation:{item.pk}", valid=True, problems=[],
                        approved_hash=content_hash(item))
        # A held email is enqueued too: execution skips it until its money item is approved, so a race with
        # that approval still ends with it sent once.
        self.after_commit.append(lambda pk=item.pk: enqueue_execution(pk))
        if item.kind in sequencing.EXPLAINED_KINDS:
            # Read after commit: an email approved meanwhile is released too (executed once by key).
            self.after_commit.append(lambda money=item: [enqueue_execution(pk) for pk in sequencing.released_by(money)])

    def reject(self, item: CompensationItem, *, policy: int | None) -> None:
        self.set_status(item, St.REJECTED, action=AuditAction.ITEM_REJECTED, reason=self.reason,
                        data={"policy": policy} if policy else None, decided_by=self.actor,
                        decided_at=timezone.now(), decision_reason=self.reason)
        self.mark_explaining_emails(item)

    def mark_explaining_emails(self, money: CompensationItem) -> None:
        """After a money item is rejected: its emails say something that will not happen now. Pending ones
        are marked; approved ones still held are reopened, so none waits for an approval that cannot come."""
        if money.kind not in sequencing.EXPLAINED_KINDS:
            return
        problem = sequencing.rejection_problem(money)
        self.rejected_money.append(money)
        for email in self.siblings(money):
            if (email.kind not in sequencing.EXPLAINING_KINDS or email.status not in (St.PENDING, St.APPROVED)
                    or email.executed_at is not None):
                continue
            if sequencing.grouped_tickets(email) and not email.edited:
                continue  # kintsugi's own grouped text: written again once the batch's rows are (write)
            fields = dict(valid=False, problems=[*email.problems, problem])
            if email.status == St.APPROVED:
                # Its execution key stays: approved again later, it is still sent at most once.
                self.set_status(email, St.PENDING, action=AuditAction.ITEM_REOPENED, reason=problem,
                                data={"rejected": money.pk, "was_approved_by": email.decided_by.get_username()
                                      if email.decided_by else None}, decided_by=None, decided_at=None,
                                decision_reason="", **fields)
                continue
            for name, value in fields.items():
                setattr(email, name, value)
            self.changed[email.pk] = email
            self.events.append(_event(email, AuditAction.ITEM_NEEDS_REDRAFT, actor=self.actor, via=self.via,
                                      reason=problem, before=email.status, data={"rejected": money.pk}))

    def write(self, refusals: list[dict]) -> None:
        """The changed rows in one UPDATE (core.bulk.update_rows: the queue totals' statement trigger fires
        once), then the events and the `refusals`' in one append."""
        if self.changed:
            now = timezone.now()
            rows = sorted(self.changed.values(), key=lambda i: i.pk)
            for item in rows:
                item.updated_at = now
            update_rows(rows, DECISION_FIELDS + (EDIT_FIELDS if self.edited else []))
        if self.events or refusals:
            trail.record_many(self.events + refusals)
        for money in self.rejected_money:
            if money.status == St.REJECTED:  # not a rejection a later refusal in the batch took back
                self.rewrite_messages(money)

    def rewrite_messages(self, money: CompensationItem) -> None:
        """After the batch's rows are written: a customer's one message that covers `money`'s ticket says
        only what happens now (compensation.delivery.grouped_messages reads the decisions from the rows),
        and one a reviewer edited, outside the batch, is marked as a one-ticket message would be."""
        problem = sequencing.rejection_problem(money)
        rewritten = grouped_messages.rewrite_for(money, actor=self.actor, via=self.via, reason=(
            f"{problem.split(':')[0]}: the customer's message now says that ticket's refund stays as it is"))
        edited = (sequencing.explaining_emails(money).select_for_update(of=("self",))
                  .select_related("incident", "decided_by")
                  .filter(status__in=(St.PENDING, St.APPROVED), executed_at__isnull=True, edited=True)
                  .exclude(pk__in=[*rewritten, *self.by_pk]))
        for email in edited:
            if not sequencing.grouped_tickets(email):
                continue  # a one-ticket email of another case: its own case's rejection marks it
            fields = dict(valid=False, problems=[*email.problems, problem])
            if email.status == St.APPROVED:
                set_status(email, St.PENDING, actor=self.actor, via=self.via, action=AuditAction.ITEM_REOPENED,
                           reason=problem, data={"rejected": money.pk, "was_approved_by": email.decided_by.get_username()
                                                 if email.decided_by else None},
                           decided_by=None, decided_at=None, decision_reason="", **fields)
                continue
            for name, value in fields.items():
                setattr(email, name, value)
            email.save(update_fields=["valid", "problems", "updated_at"])
            trail.record(action=AuditAction.ITEM_NEEDS_REDRAFT, subject_type="compensation_item", subject_id=email.pk,
                         via=self.via, actor=self.actor, reason=problem, incident_id=email.incident_id,
                         from_status=email.status, to_status=email.status, workspace=money.incident.workspace_id,
                         data={"rejected": money.pk})


# The fields a decision changes (status and decision, a reopened or marked email's), and an edit's.
DECISION_FIELDS = ["status", "decided_by", "decided_at", "decision_reason", "execution_key", "valid", "problems",
                   "approved_hash", "updated_at"]
EDIT_FIELDS = ["edited", *DRAFT_FIELDS]


def _snapshot(items: list[CompensationItem]) -> list[tuple[CompensationItem, dict]]:
    return [(i, {name: getattr(i, name) for name in ("status", "decided_by_id", "decided_at", "decision_reason",
                                                     "execution_key", "valid", "problems", "approved_hash",
                                                     "edited", *DRAFT_FIELDS)}) for i in items]


def _restore(saved: list[tuple[CompensationItem, dict]]) -> None:
    for item, values in saved:
        for name, value in values.items():
            setattr(item, name, value)


def decide(*, asked: list[Asked], decision: str, actor, reason: str, via: str,
           policy: int | None = None) -> Outcome:
    """Approve (decision "approve") or reject ("reject") the items of `asked`, in that order, in one
    transaction (see the module). Every refusal is recorded and returned with its item; NotVisible is
    raised for an item of a workspace `actor` may not see. `reason` is the decision's, already checked."""
    outcome = Outcome()
    if not asked:
        return outcome
    pks = [a.item.pk for a in asked]
    # Without the repair's plan and verification (megabytes of JSON on a large repair), or they come per item.
    current = CompensationItem.objects.select_related("incident").defer("incident__plan", "incident__verification")
    current = {i.pk: i for i in current.filter(pk__in=pks)}
    missing = [pk for pk in pks if pk not in current]
    if missing:
        raise CompensationItem.DoesNotExist(f"no compensation item #{missing[0]}")
    refusals: list[tuple[CompensationItem, Exception]] = []
    checked: dict[int, tuple[ReviewRefused | None, bool]] = {}
    relaxed, todo = {}, []
    for a in asked:
        item = current[a.item.pk]
        if item.incident_id not in checked:
            checked[item.incident_id] = reviewer_refusal(item, actor, via=via, action=decision)
        refusal, relaxed[item.pk] = checked[item.incident_id]
        if refusal is not None:
            refusals.append((item, refusal))
        else:
            todo.append(a)
    attempted = {a.item.pk: decision + (" (edited)" if a.edits else "") for a in asked}
    with transaction.atomic():
        batch = _locked_batch([current[a.item.pk] for a in todo], actor=actor, via=via, reason=reason)
        for a in todo:
            item = batch.by_pk[a.item.pk]
            saved, marks = _snapshot(batch.siblings(item)), (len(batch.events), len(batch.after_commit))
            changed = set(batch.changed)
            try:
                _decide_one(batch, item, a, decision=decision, relaxed=relaxed[item.pk], policy=policy)
            except DecisionRefused as exc:  # nothing of this item's decision stays
                _restore(saved)
                del batch.events[marks[0]:], batch.after_commit[marks[1]:]
                for pk in set(batch.changed) - changed:
                    del batch.changed[pk]
                refusals.append((current[item.pk], exc))
                continue
            outcome.decided.append(item)
        batch.write([refusal_event(item, actor=actor, via=via, attempted=attempted[item.pk], exc=exc)
                     for item, exc in refusals])
        for callback in batch.after_commit:
            transaction.on_commit(callback)
    order = {pk: n for n, pk in enumerate(pks)}
    outcome.refused = sorted(refusals, key=lambda r: order[r[0].pk])
    return outcome


def _locked_batch(items: list[CompensationItem], *, actor, via: str, reason: str) -> _Batch:
    """Take the chains' locks (first, in the order record_many takes them), then lock every item of the
    batch's tickets in one query: the money item an email speaks of is read, and a rejection marks emails."""
    if not items:  # every item refused before the lock: only the refusals are appended
        return _Batch([], actor=actor, via=via, reason=reason)
    for ws in sorted({i.incident.workspace_id for i in items}):
        trail.lock_chain(ws)
    incidents, tickets = {i.incident_id for i in items}, {i.ticket_id for i in items}
    wanted = {(i.incident_id, i.ticket_id) for i in items}
    rows = (CompensationItem.objects.select_for_update(of=("self",)).select_related("incident", "decided_by")
            .defer("incident__plan", "incident__verification")
            .filter(incident_id__in=incidents, ticket_id__in=tickets).order_by("pk"))
    return _Batch([r for r in rows if (r.incident_id, r.ticket_id) in wanted], actor=actor, via=via, reason=reason)


def _decide_one(batch: _Batch, item: CompensationItem, asked: Asked, *, decision: str, relaxed: bool,
                policy: int | None) -> None:
    if item.status != St.PENDING:
        raise DecisionRefused(f"item #{item.pk} is already {item.status}")
    if not gates.decidable(item.incident):
        # Drafted from the checkpointed plan while the repair was still being applied.
        raise DecisionRefused(f"incident #{item.incident_id} is {item.incident.status}; its items can "
                              f"be decided once its repair is applied, and execute once its repair is verified")
    if asked.shown is not None and content_hash(item) != asked.shown:
        # Read under the item's lock: an edit or a redraft since the page was shown wins the race.
        raise DecisionRefused(f"item #{item.pk} changed after it was shown to you (its text, subject, "
                              f"recipient or amount): read it again before deciding")
    drafted = draft_fields(item)
    if asked.edits:
        batch.apply_edits(item, asked.edits)
    if decision == "approve":
        batch.approve(item, drafted=drafted, edited=bool(asked.edits), policy=policy)
    else:
        batch.reject(item, policy=policy)
    if relaxed:
        batch.events.append(dict(
            action=AuditAction.FOUR_EYES_RELAXED, subject_type="compensation_item", subject_id=item.pk, via=batch.via,
            actor=batch.actor, reason="KINTSUGI_FOUR_EYES is off: the flagger decided an item of their own incident",
            incident_id=item.incident_id, workspace=item.incident.workspace_id,
            data={"decision": decision, "decision_reason": batch.reason}))


def enqueue_execution(item_id: int) -> None:
    from compensation.tasks import execute_compensation

    from compensation.delivery.approval import undo_seconds

    # When the broker is down the item stays approved; `execute_approved` picks it up. Sent after the
    # undo window (KINTSUGI_UNDO_SECONDS), so an approval taken back in it sends nothing.
    send(execute_compensation, item_id, what=f"the execution of compensation item {item_id}",
         countdown=undo_seconds() or None)
