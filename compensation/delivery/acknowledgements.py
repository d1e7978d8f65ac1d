"""A team that performs its own effects: the approved items offered to its agent (the agent_pull
connector), and the agent's answer for each.

`offered(token=...)` is what the agent pulls: approved items of the token's workspace whose delivery
awaits its acknowledgement, oldest first, each with what it compensates and its execution key (the
idempotency key the agent carries to its own provider, the same on every offer of the item).

A token limited to some agents (AgentToken.agents) pulls and acknowledges only the items whose
compensated actions were all recorded by those agents (within_token): a team's refund agent undoes its
own refunds, not the mail another team's agent sent. An unrestricted token has its whole workspace.

`acknowledge(...)` records the agent's answer, in one transaction under the workspace's audit chain
and the delivery's row lock:
1. the item's agent_pull delivery is looked up among the token's items only (within_token): an item of
   another workspace or of agents the token may not record as, one never offered, or one that does not
   exist are the same `UnknownCompensation` (404);
2. a delivery awaiting its answer takes it: "performed" makes it `delivered` and the item executed
   (audited as any connector's delivery is: item.executed), "failed" makes it `failed` with the agent's
   message as its reason, for a person to deliver again or decide otherwise (the item stays approved);
   both are logged as a delivery attempt and audited (item.delivery_acknowledged);
3. the same answer again (same outcome, same reference) returns the first answer and writes nothing:
   the agent's retry after a lost response;
4. any other answer to a delivery no longer awaiting one is `AckConflict` (409), and changes nothing.
Limits: the answer's identity is its outcome and reference; a repeat with another message returns the
first answer, first message included.
"""
from __future__ import annotations

from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from compensation.delivery_models import Delivery, DeliveryAttempt, DeliveryState
from compensation.delivery.links import compensates, item_payload
from compensation.models import CompensationItem
from core.audit import trail
from core.errors import DomainError
from core.scrub import scrub_secrets
from core.vocabulary import AuditAction
from provenance import validation
from repairs.models import ActionOutcome, RepairEffect

S, St = DeliveryState, CompensationItem.Status
CONNECTOR = "agent_pull"
REFERENCE_MAX, MESSAGE_MAX = 128, 300  # Delivery.reference, DeliveryAttempt.detail


class AckOutcome(models.TextChoices):
    PERFORMED = "performed", "performed by the team's agent"
    FAILED = "failed", "failed at the team's agent"


ACK_STATES = {AckOutcome.PERFORMED: S.DELIVERED, AckOutcome.FAILED: S.FAILED}


class UnknownCompensation(DomainError, LookupError):
    code, status = "not_found", 404


class AckConflict(DomainError, RuntimeError):
    code, status = "conflict", 409


def within_token(items: QuerySet[CompensationItem], token) -> QuerySet[CompensationItem]:
    """Those of `items` that `token` may pull and acknowledge: its workspace's; for a token limited to
    agents, only the items whose every compensated action one of its agents recorded (as the repair that
    walked the action saw it). Fails closed: an item compensating no action, or an action whose agent is
    not known, is left out."""
    items = items.filter(incident__workspace_id=token.workspace_id)
    if not token.agents:
        return items
    compensated = RepairEffect.objects.filter(compensation_items=OuterRef("pk"))
    recorded_by = Subquery(ActionOutcome.objects.filter(incident_id=OuterRef("incident_id"),
                                                        action_id=OuterRef("action_id")).values("agent")[:1])
    foreign = compensated.annotate(agent=recorded_by).filter(Q(agent__isnull=True) | ~Q(agent__in=token.agents))
    return items.filter(Exists(compensated)).exclude(Exists(foreign))


def offered(*, token, after: int | None = None, limit: int = 50) -> list[CompensationItem]:
    """Approved items awaiting the token's agent (within_token), by id after `after` (keyset: a page
    never shifts under an acknowledgement made meanwhile)."""
    qs = (within_token(CompensationItem.objects.all(), token).select_related("incident__workspace", "delivery")
          .defer("incident__plan", "incident__verification")
          .filter(status=St.APPROVED, delivery__connector=CONNECTOR, delivery__state=S.AWAITING_ACK))
    if after is not None:
        qs = qs.filter(pk__gt=after)
    return list(qs.order_by("pk")[:limit])


def offered_payloads(items: list[CompensationItem]) -> list[dict]:
    """Each offered item as its agent receives it: the webhook's item, its execution key and delivery."""
    links = compensates(items)
    return [item_payload(item, links[item.pk]) | {
        "incident": item.incident_id, "workspace": item.incident.workspace.name,
        "idempotency_key": item.execution_key, "approved_at": item.decided_at} for item in items]


def _answer(delivery: Delivery) -> dict:
    ack = (DeliveryAttempt.objects.filter(delivery=delivery, outcome__in=ACK_STATES.values()).order_by("-pk").first())
    outcome = next(o for o, s in ACK_STATES.items() if s == delivery.state)
    return {"id": delivery.item_id, "outcome": outcome.value, "reference": delivery.reference,
            "message": ack.detail if ack else "", "delivery_state": delivery.state,
            "item_status": delivery.item.status, "acknowledged_at": ack.at if ack else None}


def acknowledge(*, token, actor, item_id: int, outcome: str, reference: str = "", message: str = "",
                via: str) -> dict:
    """Record the team's agent's answer for one offered item (see the module docstring). Returns the
    answer: id, outcome, reference, message, delivery_state, item_status, acknowledged_at."""
    if outcome not in AckOutcome.values:
        raise validation.InvalidInput(f"outcome must be one of {', '.join(AckOutcome.values)}")
    outcome = AckOutcome(outcome)
    if isinstance(item_id, bool) or not isinstance(item_id, int) or not 0 < item_id < 2 ** 63:
        raise UnknownCompensation(f"no compensation #{item_id} was offered to this workspace's agent")
    reference = validation.identifier(reference, field="reference", max_length=REFERENCE_MAX) if reference else ""
    message = scrub_secrets(validation.text(message or "", field="message", max_length=MESSAGE_MAX).strip())
    with transaction.atomic():
        trail.lock_chain(token.workspace_id)
        delivery = (Delivery.objects.select_for_update(of=("self",)).select_related("item__incident")
                    .filter(item_id=item_id, connector=CONNECTOR,
                            item__in=within_token(CompensationItem.objects.all(), token).values("pk"))
                    .first())
        if delivery is None:
            raise UnknownCompensation(f"no compensation #{item_id} was offered to this workspace's agent")
        if delivery.state in ACK_STATES.values():
            if delivery.state == ACK_STATES[outcome] and delivery.reference == reference:
                return _answer(delivery)
            raise AckConflict(f"compensation #{item_id} was already acknowledged as "
                              f"{_answer(delivery)['outcome']} with another reference or outcome; nothing changed")
        if delivery.state != S.AWAITING_ACK:
            raise AckConflict(f"compensation #{item_id} is not awaiting an acknowledgement (its delivery is "
                              f"{delivery.state})")
        item = CompensationItem.objects.select_for_update().get(pk=item_id)
        was, now = delivery.state, timezone.now()
        delivery.state, delivery.reference, delivery.next_attempt_at = ACK_STATES[outcome], reference, None
        delivery.failure_reason = (message or "the team's agent reported a failure") if outcome == AckOutcome.FAILED else ""
        if outcome == AckOutcome.PERFORMED:
            delivery.accepted_at = delivery.accepted_at or now
        delivery.save(update_fields=["state", "reference", "next_attempt_at", "failure_reason", "accepted_at",
                                     "updated_at"])
        DeliveryAttempt.objects.create(delivery=delivery, outcome=delivery.state, detail=message)
        data = {"outcome": outcome.value, "reference": reference, "message": message,
                "idempotency_key": item.execution_key, "token": token.prefix}
        trail.record(action=AuditAction.ITEM_DELIVERY_ACKNOWLEDGED, subject_type="compensation_item",
                     subject_id=item.pk, via=via, actor=actor, reason=message or outcome.label,
                     incident_id=item.incident_id, workspace=token.workspace_id, from_status=was,
                     to_status=delivery.state, data=data)
        if outcome == AckOutcome.PERFORMED and item.status == St.APPROVED:
            item.status, item.executed_at = St.EXECUTED, now
            item.save(update_fields=["status", "executed_at", "updated_at"])
            trail.record(action=AuditAction.ITEM_EXECUTED, subject_type="compensation_item", subject_id=item.pk,
                         via=via, actor=actor, reason="performed by the team's agent", incident_id=item.incident_id,
                         workspace=token.workspace_id, from_status=St.APPROVED, to_status=St.EXECUTED,
                         data={"idempotency_key": item.execution_key, "attempts": item.execution_attempts,
                               "delivery": delivery.state, "connector": CONNECTOR, "reference": reference})
        delivery.item = item
        return _answer(delivery)
