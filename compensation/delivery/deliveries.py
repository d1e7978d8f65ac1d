"""Delivering approved items through their workspace's connectors, exactly once, with every attempt
logged beside the item.

`send(item)` is called by compensation.delivery.execution between the approval's lock and marking the item
executed. It
1. fixes the item's connector on its first try (a later change of the workspace's choice never
   reroutes an item already on its way) and counts the attempt;
2. for a connector that cannot resume safely (SMTP has no idempotency key), marks the delivery `sending`
   before the request: finding it still `sending` on a later run means a worker died while the server
   answered, and the delivery becomes `uncertain` for a person instead of being sent twice;
3. sends; a temporary failure is retried with backoff (the task's retry and the sweep both respect
   `next_attempt_at`), up to KINTSUGI_DELIVERY_MAX_ATTEMPTS, then the delivery is dead-lettered; a
   permanent one fails with its reason;
4. stores the provider's answer. An item offered to a team's own agent (agent_pull) has not left: it
   stays approved, `awaiting_ack`, until the agent acknowledges it (compensation.delivery.acknowledgements).
Connectors that resume safely (Stripe's Idempotency-Key, the webhook's Idempotency-Key, the sandbox's
unique keys) repeat step 3 after a crash with the same key and the provider answers the first result.
"""
from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compensation.delivery.connectors import Outcome, PermanentFailure, TemporaryFailure, connector
from compensation.delivery.connectors import config
from compensation.delivery_models import Delivery, DeliveryAttempt, DeliveryState, WorkspaceConnector
from compensation.models import CompensationItem
from core.audit import trail
from core import broker
from core.scrub import redact_url
from core.vocabulary import AuditAction, ItemStatus
from provenance.models import Workspace

S = DeliveryState


class DeliveryRefused(PermissionError):
    pass


def _backoff(attempts: int) -> timedelta:
    base = settings.KINTSUGI_RETRY_BACKOFF_SECONDS
    return timedelta(seconds=min(base * 2 ** max(attempts - 1, 0), settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS))


def _log(delivery: Delivery, outcome: str, *, status_code=None, started: float | None = None, detail: str = "") -> None:
    ms = int((time.monotonic() - started) * 1000) if started is not None else 0
    DeliveryAttempt.objects.create(delivery=delivery, outcome=outcome, status_code=status_code,
                                   duration_ms=ms, detail=detail[:300])


def _start(item: CompensationItem) -> tuple[Delivery, bool]:
    """Lock (or create) the item's delivery and decide whether to send now. Returns (delivery, send?)."""
    with transaction.atomic():
        name, _ = config.choice(workspace_id=item.incident.workspace_id, kind=item.kind)
        Delivery.objects.get_or_create(item=item, defaults={"connector": name})
        delivery = Delivery.objects.select_for_update().get(item=item)
        if delivery.state in S.settled() or delivery.state in S.needs_person() or delivery.state == S.AWAITING_ACK:
            return delivery, False
        if delivery.state == S.SENDING and not connector(delivery.connector).resumes_safely:
            delivery.state = S.UNCERTAIN
            delivery.failure_reason = "the worker stopped while the provider answered: check, then deliver again"
            delivery.save(update_fields=["state", "failure_reason", "updated_at"])
            _log(delivery, S.UNCERTAIN, detail=delivery.failure_reason)
            return delivery, False
        if delivery.next_attempt_at and delivery.next_attempt_at > timezone.now():
            raise TemporaryFailure("waiting for the next try")
        delivery.attempts += 1
        if not connector(delivery.connector).resumes_safely:
            delivery.state = S.SENDING
        delivery.save(update_fields=["attempts", "state", "updated_at"])
        return delivery, True


def send(item: CompensationItem) -> Outcome | None:
    """Deliver one approved item through its connector (see the module docstring). Returns the outcome
    once the item has left, None when a person must decide (failed, dead, uncertain) or the team's agent
    has yet to acknowledge it (awaiting_ack); raises TemporaryFailure when it should be tried again later,
    DeliveryRefused for an item never approved (it has no execution key to carry)."""
    if not item.execution_key:
        raise DeliveryRefused(f"item #{item.pk} has no execution key (it was never approved)")
    delivery, now = _start(item)
    if not now:
        return Outcome(delivery.state, delivery.reference) if delivery.state in S.settled() else None
    _, options = config.choice(workspace_id=item.incident.workspace_id, kind=item.kind)
    started = time.monotonic()
    try:
        outcome = connector(delivery.connector).send(item, options)
    except TemporaryFailure as e:
        with transaction.atomic():
            delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
            dead = delivery.attempts >= settings.KINTSUGI_DELIVERY_MAX_ATTEMPTS
            delivery.state = S.DEAD if dead else S.RETRYING
            delivery.failure_reason = e.detail
            delivery.next_attempt_at = None if dead else timezone.now() + _backoff(delivery.attempts)
            delivery.save(update_fields=["state", "failure_reason", "next_attempt_at", "updated_at"])
            _log(delivery, delivery.state, status_code=e.status_code, started=started, detail=e.detail)
        if dead:
            return None
        raise
    except PermanentFailure as e:
        with transaction.atomic():
            delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
            delivery.state, delivery.failure_reason, delivery.next_attempt_at = S.FAILED, e.detail, None
            delivery.save(update_fields=["state", "failure_reason", "next_attempt_at", "updated_at"])
            _log(delivery, S.FAILED, status_code=e.status_code, started=started, detail=e.detail)
        return None
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
        delivery.state, delivery.reference = outcome.state, outcome.reference[:128]
        delivery.failure_reason, delivery.next_attempt_at = "", None
        delivery.accepted_at = delivery.accepted_at or timezone.now()
        delivery.save(update_fields=["state", "reference", "failure_reason", "next_attempt_at", "accepted_at",
                                     "updated_at"])
        _log(delivery, outcome.state, status_code=outcome.status_code, started=started, detail=outcome.detail)
    return outcome if outcome.state in S.settled() else None


def due(queryset):
    """Approved items the sweep may try now: no delivery yet, or one waiting for a retry whose time came."""
    now = timezone.now()
    from django.db.models import Q

    return queryset.filter(Q(delivery__isnull=True)
                           | Q(delivery__state__in=[S.QUEUED, S.RETRYING, S.SENDING],
                               delivery__next_attempt_at__isnull=True)
                           | Q(delivery__state=S.RETRYING, delivery__next_attempt_at__lte=now))


def summary(item: CompensationItem) -> dict | None:
    """What the API and the pages show beside the decision: state, connector, reference, attempts."""
    try:
        delivery = item.delivery
    except Delivery.DoesNotExist:
        delivery = None
    if delivery is None:
        if item.status not in (ItemStatus.APPROVED, ItemStatus.EXECUTED):
            return None
        name, _ = config.choice(workspace_id=item.incident.workspace_id, kind=item.kind)
        return {"state": S.QUEUED.value, "connector": name, "reference": "", "attempts": 0, "failure_reason": "",
                "accepted_at": None}
    return {"state": delivery.state, "connector": delivery.connector, "reference": delivery.reference,
            "attempts": delivery.attempts, "failure_reason": delivery.failure_reason,
            "accepted_at": delivery.accepted_at.isoformat() if delivery.accepted_at else None}


def words(item: CompensationItem) -> str:
    """The decision and the delivery in one line: "approved · submitted to Stripe · pending"."""
    s = summary(item)
    if s is None:
        return item.status
    label = connector(s["connector"]).label
    return f"{item.status} · {S(s['state']).label} via {label}" + (f" · {s['failure_reason']}" if s["failure_reason"] else "")


def deliver_again(*, item: CompensationItem, actor, reason: str, via: str) -> Delivery:
    """A person sends a failed, dead or uncertain delivery once more (a Reviewer of the item's workspace)."""
    from provenance.access import tenancy

    reason = (reason or "").strip()
    if not reason:
        raise DeliveryRefused("delivering again needs a reason")
    tenancy.require_visible(actor, item.incident.workspace_id, via=via, what=f"item #{item.pk}")
    if not (actor.is_superuser or actor.has_perm("compensation.review_compensationitem")):
        raise DeliveryRefused(f"user {actor.username!r} may not deliver items (Reviewer needed)")
    with transaction.atomic():
        trail.lock_chain(item.incident.workspace_id)
        delivery = Delivery.objects.select_for_update().filter(item=item).first()
        if delivery is None:
            raise DeliveryRefused(f"item #{item.pk} has not been tried yet: there is nothing to deliver again")
        if delivery.state not in S.needs_person():
            raise DeliveryRefused(f"item #{item.pk}'s delivery is {delivery.state}: only a failed, dead or "
                                  f"uncertain one is delivered again")
        was = delivery.state
        delivery.state, delivery.next_attempt_at, delivery.failure_reason = S.QUEUED, None, ""
        delivery.save(update_fields=["state", "next_attempt_at", "failure_reason", "updated_at"])
        CompensationItem.objects.filter(pk=item.pk, status=CompensationItem.Status.EXECUTED).update(
            status=CompensationItem.Status.APPROVED, executed_at=None)
        trail.record(action=AuditAction.ITEM_DELIVERY_RETRIED, subject_type="compensation_item", subject_id=item.pk, via=via,
                     actor=actor, reason=reason, incident_id=item.incident_id, from_status=was, to_status=S.QUEUED)
    from compensation.tasks import execute_compensation

    transaction.on_commit(lambda: broker.send(execute_compensation, item.pk, what=f"the delivery of item {item.pk}"))
    return delivery


def set_connector(*, workspace: Workspace, kind: str, name: str, options: dict | None, actor, reason: str,
                  via: str) -> WorkspaceConnector:
    """Choose the connector of one item kind in one workspace (a Workspace admin there, audited with its
    options, a URL's credentials and query redacted: the row alone keeps the whole URL). ValueError when
    the connector refuses the options (its schema, the secret registry, the egress policy)."""
    from provenance.access.onboarding import OnboardingRefused, may_manage_agents

    if not may_manage_agents(actor, workspace):
        raise OnboardingRefused(f"user {getattr(actor, 'username', None)!r} may not choose connectors in "
                                f"workspace {workspace.name!r} (its Workspace admin needed)")
    reason = (reason or "").strip()
    if not reason:
        raise DeliveryRefused("choosing a connector needs a reason")
    if kind not in CompensationItem.Kind.values:
        raise ValueError(f"unknown item kind {kind!r} (known: {', '.join(CompensationItem.Kind.values)})")
    chosen = connector(name)
    if kind not in chosen.kinds:
        raise ValueError(f"connector {name!r} does not deliver {kind!r}")
    # The connector's schema: unknown keys, wrong types, secret names the registry does not hold for this
    # workspace and destinations the egress policy refuses are refused here, before anything is written.
    options = chosen.validate(dict(options or {}), workspace=workspace.name)
    shown = {k: redact_url(v) if chosen.schema[k].role == "url" else v for k, v in options.items()}
    with transaction.atomic():
        trail.lock_chain(workspace)
        row, _ = WorkspaceConnector.objects.update_or_create(workspace=workspace, kind=kind,
                                                             defaults={"connector": name, "options": options})
        trail.record(action=AuditAction.CONNECTOR_SET, subject_type="workspace", subject_id=workspace.pk, via=via, actor=actor,
                     reason=reason, workspace=workspace, data={"kind": kind, "connector": name, "options": shown})
    return row
