"""Compensation items (drafts people approve or reject) and the append-only audit trail.

Kinds of item (what `review_queue` lists as "kind"):
- `refund_reversal`: a refund that already left on a now-invalid decision; executing it files a reversal
  request in the ledger. When the repair also produced a replacement refund on the same ticket, the two
  are netted into this one item for the difference (a full refund that should have been partial).
- `correction_email`: a customer email that already left on a now-invalid decision; executing it sends
  the correction. When the ticket's refund was netted, the replacement confirmation is folded into it:
  one email that explains the difference. A customer with several tickets in the incident gets one
  for all of them, on their first ticket (compensation.drafting.grouping; `facts["tickets"]`).
- `replacement_refund` / `replacement_email`: effects the repair itself produced (re-runs, new actions).
  They were held, never sent, and wait for approval in the same queue.
- `manual_compensation`: an effect of a kind kintsugi cannot undo or perform (one nobody registered in
  compensation.drafting.effect_kinds, such as a team's `store_credit`), invalidated or held by the repair. It
  carries the original effect; approving it records what a person did by hand, and nothing leaves.
The refund reversal, the correction email and the manual compensation are the "compensation items" an
incident counts (one per invalidated effect group); the replacement kinds are listed beside them.
"""
from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import Case, F, IntegerField, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Upper

from compensation.drafting import kinds
from core.audit.event import AuditEvent  # noqa: F401  (registered under this app's label)
from core.money import format_money
from core.vocabulary import ItemKind, ItemStatus
from repairs.models import Incident

# Review-queue rank: pending first, then approved (awaiting execution), then decided. Shared by the
# queue's ORDER BY and its index, which must be the same expression for the index to serve the order.
QUEUE_ORDER = Case(When(status=ItemStatus.PENDING, then=Value(0)), When(status=ItemStatus.APPROVED, then=Value(1)),
                   default=Value(2), output_field=IntegerField())


def _queue_total_upsert(deltas: str) -> str:
    """Trigger body: add the (incident, status, currency) sums of `deltas` (rows of incident_id, status,
    currency, n, c) to QueueTotal. Groups whose deltas cancel out are skipped, so a redraft or an edit of
    the text takes no lock on the totals; rows are upserted in key order so two transactions that touch
    the same totals lock them in the same order."""
    return (
        "INSERT INTO compensation_queuetotal AS t (incident_id, status, currency, items, cents) "
        f"SELECT incident_id, status, currency, sum(n), sum(c) FROM ({deltas}) AS d "
        "GROUP BY incident_id, status, currency HAVING sum(n) <> 0 OR sum(c) <> 0 "
        "ORDER BY incident_id, status, currency "
        "ON CONFLICT (incident_id, status, currency) "
        "DO UPDATE SET items = t.items + EXCLUDED.items, cents = t.cents + EXCLUDED.cents; "
        "RETURN NULL;"
    )


class CompensationItem(models.Model):
    Kind = ItemKind

    Status = ItemStatus

    # Indexed by compensation_incident_queue below, which leads with incident.
    incident = models.ForeignKey("repairs.Incident", on_delete=models.PROTECT, related_name="compensation_items",
                                 db_index=False)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # incident:kind:ticket:effect ids; makes drafting idempotent when repair_finished is sent again.
    draft_key = models.CharField(max_length=200, unique=True, editable=False)
    effects = models.ManyToManyField("repairs.RepairEffect", related_name="compensation_items", blank=True)

    # Trusted: computed from the ticket and the repair, never from model output.
    ticket_id = models.CharField(max_length=32)
    customer_email = models.EmailField(help_text="The ticket's customer: the only allowed recipient.")
    facts = models.JSONField(default=dict, help_text="Ticket snapshot and netting numbers the draft is checked against.")
    original = models.JSONField(default=list, help_text="The effects this item compensates or releases.")
    path = models.JSONField(default=list, help_text="From the flagged source to the effect.")

    # Untrusted: drafted by the model (or edited by a reviewer) and validated before approval.
    to = models.CharField(max_length=320, blank=True)
    subject = models.CharField(max_length=300, blank=True)
    body = models.TextField(blank=True)
    payment_reference = models.CharField(max_length=64, blank=True)
    amount_cents = models.IntegerField(default=0, help_text="Money this item moves when executed (0 for emails).")
    currency = models.CharField(max_length=8, default="USD")
    drafted_by = models.CharField(max_length=120, blank=True, help_text="Model backend that wrote the draft.")
    prompt_version = models.CharField(max_length=64, blank=True)
    valid = models.BooleanField(default=False)
    problems = models.JSONField(default=list, blank=True)
    edited = models.BooleanField(default=False)

    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="compensation_decisions")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    # Recorded when the item is approved, before anything is sent: the ledger and the outbox refuse a
    # second row with the same key, so retries and double clicks send nothing twice.
    execution_key = models.CharField(max_length=128, unique=True, null=True, blank=True, editable=False)
    execution_attempts = models.PositiveIntegerField(default=0)
    # SHA-256 of what the approval bound (compensation.delivery.approval.content_hash): execution refuses an item
    # whose content no longer hashes to it, so what leaves is exactly what a person approved.
    approved_hash = models.CharField(max_length=64, blank=True, editable=False)
    executed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["incident", "ticket_id", "kind", "pk"]
        permissions = [("review_compensationitem", "Can approve, reject or edit compensation drafts")]
        indexes = [
            # The review queue's order (pending first, newest incident first): with this index a page of
            # a 100k-item queue is an index scan instead of sorting every row.
            models.Index(QUEUE_ORDER, F("incident").desc(), F("ticket_id"), F("kind"), F("id"),
                         name="compensation_queue_order"),
            # The same order under the admin's filters, so every sidebar choice is an index scan too: one
            # status (the admin then orders without the rank, constant there; through the queue_order
            # index, "executed" sat behind every pending and approved row: ~130-265 ms for 50 rows), one
            # incident, or both.
            models.Index(F("status"), F("incident").desc(), F("ticket_id"), F("kind"), F("id"),
                         name="compensation_status_queue"),
            models.Index(F("incident"), QUEUE_ORDER, F("ticket_id"), F("kind"), F("id"),
                         name="compensation_incident_queue"),
            models.Index(fields=["customer_email"], name="compensation_customer"),
            # A case's items (one ticket of one incident): the case list builds its page's cases, and its
            # filters ask "has this case an item that …", by this key.
            # Covering: the case list's GROUP BY reads the index alone, in ticket order, not the wide rows.
            models.Index(fields=["incident", "ticket_id"], name="compensation_case_key",
                         include=["status", "kind", "amount_cents", "currency"]),
            # The case list's search ("has this case an item whose ticket, customer address or customer
            # name contains …"): trigram indexes on exactly the expressions icontains compares, so a search
            # of 20,000 cases reads the few matching rows instead of every item of the incident; and the
            # amount it may also match, by incident, so each arm of the OR has an index to read.
            GinIndex(OpClass(Upper("ticket_id"), name="gin_trgm_ops"), name="compensation_ticket_trgm"),
            GinIndex(OpClass(Upper("customer_email"), name="gin_trgm_ops"), name="compensation_email_trgm"),
            GinIndex(OpClass(Upper(KT("facts__customer")), name="gin_trgm_ops"), name="compensation_customer_trgm"),
            models.Index(fields=["incident", "amount_cents"], name="compensation_incident_amount"),
            # (compensation_pending_total, a partial index for the dashboard's pending total, was dropped in
            # 0005: the dashboard reads QueueTotal, and without an all-visible map, which a freshly loaded
            # table lacks, the planner skipped it for a parallel seq scan over every row anyway.)
        ]
        # Keep QueueTotal exact in the same transaction as every write, bulk_create and queryset
        # update() included. Statement-level with transition tables: a 5,000-row bulk_create costs one
        # grouped upsert, not 5,000; an update that changes no status, currency or amount writes nothing.
        # (Postgres allows transition tables only on single-event triggers, hence one trigger per event.)
        triggers = [
            pgtrigger.Trigger(name="queue_total_insert", level=pgtrigger.Statement, when=pgtrigger.After,
                              operation=pgtrigger.Insert, referencing=pgtrigger.Referencing(new="new_items"),
                              func=_queue_total_upsert("SELECT incident_id, status, currency, 1 AS n, "
                                                       "amount_cents::bigint AS c FROM new_items")),
            pgtrigger.Trigger(name="queue_total_update", level=pgtrigger.Statement, when=pgtrigger.After,
                              operation=pgtrigger.Update,
                              referencing=pgtrigger.Referencing(old="old_items", new="new_items"),
                              func=_queue_total_upsert("SELECT incident_id, status, currency, 1 AS n, "
                                                       "amount_cents::bigint AS c FROM new_items UNION ALL "
                                                       "SELECT incident_id, status, currency, -1, "
                                                       "-amount_cents::bigint FROM old_items")),
            pgtrigger.Trigger(name="queue_total_delete", level=pgtrigger.Statement, when=pgtrigger.After,
                              operation=pgtrigger.Delete, referencing=pgtrigger.Referencing(old="old_items"),
                              func=_queue_total_upsert("SELECT incident_id, status, currency, -1 AS n, "
                                                       "-amount_cents::bigint AS c FROM old_items")),
            pgtrigger.Trigger(name="queue_total_truncate", level=pgtrigger.Statement, when=pgtrigger.After,
                              operation=pgtrigger.Truncate,
                              func="DELETE FROM compensation_queuetotal; RETURN NULL;"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.get_kind_display()} for {self.ticket_id}"

    @property
    def is_compensation(self) -> bool:
        return self.kind in kinds.COMPENSATING

    @property
    def moves_money(self) -> bool:
        return self.kind in kinds.MONEY

    @property
    def waiting_for_ticket(self) -> bool:
        """Drafted while its ticket was not in the workspace, and still waiting for it (or for a customer)."""
        return bool(self.facts.get("ticket_missing")) and any(p.startswith("waiting for ticket") for p in self.problems)

    @property
    def approvable(self) -> bool:
        return self.status == self.Status.PENDING and self.valid

    @property
    def amount_display(self) -> str:
        return format_money(self.amount_cents, self.currency)


class QueueTotal(models.Model):
    """Review items and the cents they move, per incident, status and currency: what the dashboard, the
    incident page and the review queue's counts read instead of aggregating the item table (tens of
    thousands of pending rows of several KB each).

    Exact, not a cache: written only by CompensationItem's statement triggers, in the same transaction
    as the item rows, so a reader sees the totals of exactly the items committed. A group whose items are
    all gone keeps a row with zeros. The cost: a transaction that changes an item's status or amount holds
    that group's total rows until commit. Every service that does so already holds the audit chain's lock
    (core.audit.trail.lock_chain) first, so they queue there anyway and the totals add no new waits or
    deadlocks; writes that leave status, currency and amount alone (redrafts, execution attempts) skip
    the totals entirely."""

    incident = models.ForeignKey("repairs.Incident", on_delete=models.CASCADE, related_name="+",
                                 db_index=False)  # the unique key below leads with incident
    status = models.CharField(max_length=16, choices=CompensationItem.Status.choices)
    currency = models.CharField(max_length=8)
    items = models.BigIntegerField(default=0)
    cents = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["incident", "status", "currency"],
                                               name="compensation_queue_total_key")]

    def __str__(self) -> str:
        return f"incident #{self.incident_id} {self.status}: {self.items} items, {format_money(self.cents, self.currency)}"


class CaseAssignment(models.Model):
    """Who works a case (one ticket of one incident): written by compensation.review.assignments only."""

    incident = models.ForeignKey("repairs.Incident", on_delete=models.CASCADE, related_name="+", db_index=False)
    ticket_id = models.CharField(max_length=32)
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="case_assignments")
    assigned_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["incident", "ticket_id"], name="compensation_case_assignment_key")]

    def __str__(self) -> str:
        return f"incident #{self.incident_id} {self.ticket_id} → {self.assignee_id}"


class ReviewPolicy(models.Model):
    """A rule that decides many items at once (compensation.review.policies), with four eyes on the rule itself:
    one person writes and previews it, another applies it."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    incident = models.ForeignKey("repairs.Incident", on_delete=models.PROTECT, related_name="review_policies")
    rule = models.CharField(max_length=500)
    decision = models.CharField(max_length=8, choices=Decision.choices, default=Decision.APPROVE)
    reason = models.TextField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # What the author's preview matched (item ids): applying decides only these, so what was previewed is
    # what is decided.
    previewed = models.JSONField(default=list)
    applier = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                related_name="+")
    applied_at = models.DateTimeField(null=True, blank=True)
    outcome = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"policy #{self.pk} on incident #{self.incident_id}: {self.decision} {self.rule}"


# Delivery (connectors, each item's way out and its attempts) keeps its models in a module of its own.
from compensation.delivery_models import Delivery, DeliveryAttempt, ProviderEvent, WorkspaceConnector  # noqa: E402,F401
from compensation.template_models import MessageTemplate  # noqa: E402,F401
from compensation.notice_models import ReviewNotice  # noqa: E402,F401
