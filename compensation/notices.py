"""Telling a workspace's reviewers that a repair's cases are ready for review: one email to each reviewer
(with the link to their inbox, the incident's cases) and one signed event to each webhook the workspace
chose (compensation.delivery.connectors.webhook), once per incident.

The notice is owed in Postgres (compensation.notice_models.ReviewNotice) from the transaction that commits
the incident's first drafted items, and settled in the transaction that records who was told. Sending is
never done from inside the drafting transaction: compensation.receivers enqueues the task once drafting is
done and committed, and when the broker refuses it the row stays owed and the sweep (send_owed_notices, on
the beat schedule) sends it. Every connection goes through core.egress: the email through the operator's
relay or email backend (the smtp connector's own connection), the webhook through its POST.

At most once per incident in the ordinary course, at most twice across a crash: a run takes the incident's
advisory lock (one sender at a time, across processes), sends nothing when the incident's chain already
says `reviewers.notified`, and writes that event and settles the row in one transaction after sending. A
process that dies between sending and that commit leaves the notice owed, and the next sweep sends it
again (the webhook event carries the same Idempotency-Key, `cases.ready:<incident>`, for receivers to
drop the second). A send that fails is logged and the others still go; the record says who was reached.
An attempt that reached nobody though someone was there to tell stays owed and is tried again later
(backing off); with nobody to tell at all (no reviewer with an address, no mail relay, no webhook) the
notice is settled as such and nothing is recorded in the chain.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from compensation.delivery.connectors.base import DeliveryFailure, connector
from compensation.delivery.connectors.webhook import post
from compensation.delivery_models import WorkspaceConnector
from compensation.models import CompensationItem, ReviewNotice
from core import locks, secret_registry
from core.audit import trail
from core.locks import advisory_lock
from core.vocabulary import AuditAction, ItemStatus, Via
from provenance.access import capabilities
from repairs.models import Incident

log = logging.getLogger(__name__)
EVENT = "cases.ready"
RETRY_CAP_SECONDS = 3600  # an owed notice that reached nobody is tried again at most this far apart
SWEEP_LIMIT = 200  # notices one sweep sends; the rest wait for the next one


def inbox_url(incident: Incident) -> str:
    """The reviewers' inbox for the incident: its cases page, as an absolute link."""
    return (settings.KINTSUGI_PUBLIC_URL.rstrip("/") + reverse("admin:compensation_compensationitem_cases")
            + f"?incident={incident.pk}")


def reviewers(incident: Incident) -> list:
    """Active members of the incident's workspace who may review, with an address, by username."""
    members = (get_user_model().objects.filter(workspaces=incident.workspace_id, is_active=True)
               .exclude(email="").order_by("username"))
    return [u for u in members if capabilities.may(u, "review")]


def cases_ready(incident: Incident) -> dict:
    """The event: how many cases and items wait, and where. No customer, amount or text of a draft."""
    pending = CompensationItem.objects.filter(incident=incident, status=ItemStatus.PENDING)
    return {"type": EVENT, "workspace": incident.workspace.name, "incident": incident.pk,
            "source": incident.source_id, "cases": pending.values("ticket_id").distinct().count(),
            "items": pending.count(), "inbox": inbox_url(incident)}


def _email(incident: Incident, event: dict, people: list) -> tuple[list[str], list[str]]:
    """The usernames reached, and the error class of each send that failed."""
    if not people:
        return [], []
    smtp = connector("smtp")
    if not smtp.configured({}, workspace=incident.workspace.name):
        return [], []
    subject = f"{event['cases']} cases to review in {event['workspace']}"
    body = (f"A repair of {event['workspace']} (incident #{incident.pk}, source {incident.source_id}) drafted "
            f"{event['items']} items in {event['cases']} cases. They are ready for your review:\n\n"
            f"{event['inbox']}\n")
    sent, failed = [], []
    connection = smtp.operator_connection(workspace=incident.workspace.name)
    for person in people:
        try:
            EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[person.email],
                         connection=connection, headers={"X-Kintsugi-Incident": str(incident.pk)}).send()
            sent.append(person.username)
        except Exception as exc:  # noqa: BLE001 - one unreachable reviewer never stops the others
            log.warning("review notice to %s for incident %s failed: %s", person.username, incident.pk,
                        type(exc).__name__)
            failed.append(f"email: {type(exc).__name__}")
    return sent, failed


def _webhooks(incident: Incident, event: dict) -> tuple[list[str], list[str]]:
    """Each distinct webhook the workspace chose, once; returns the kinds whose webhook took the event, and
    the error class of each that did not."""
    hook = connector("webhook")
    reached, failed, seen = [], [], set()
    for row in WorkspaceConnector.objects.filter(workspace_id=incident.workspace_id, connector=hook.name).order_by("kind"):
        target = (row.options.get("url"), row.options.get("secret_env"))
        if target in seen:
            continue
        seen.add(target)
        try:
            key = hook.secret(row.options, "secret_env", workspace=incident.workspace.name)
            if not key:
                raise DeliveryFailure("the webhook's signing secret is not set")
            post(row.options.get("url", ""), key, event, idempotency_key=f"{EVENT}:{incident.pk}")
            reached.append(row.kind)
        except (DeliveryFailure, secret_registry.SecretRefused) as exc:
            log.warning("review event for incident %s to the %s webhook failed: %s", incident.pk, row.kind, exc)
            failed.append(f"webhook: {type(exc).__name__}")
    return reached, failed


def notify_reviewers(*, incident_id: int) -> dict | None:
    """Email the reviewers and post the event, once per incident; what was reached (None: already done)."""
    with advisory_lock(locks.NOTIFY_REVIEWERS, incident_id, wait=False) as mine:
        return _notify(incident_id) if mine else None  # another worker is telling them


def _notify(incident_id: int) -> dict | None:
    incident = Incident.objects.select_related("workspace").defer("plan").get(pk=incident_id)
    if incident.audit_events.filter(action=AuditAction.REVIEWERS_NOTIFIED).exists():
        _settle(incident_id, ReviewNotice.Outcome.SENT)  # told before the notice was owed (drafted again)
        return None
    event = cases_ready(incident)
    if not event["items"]:
        _settle(incident_id, ReviewNotice.Outcome.NOTHING)
        return {"emailed": [], "webhooks": []}
    emailed, mail_failed = _email(incident, event, reviewers(incident))
    webhooks, hook_failed = _webhooks(incident, event)
    reached = {"emailed": emailed, "webhooks": webhooks}
    if not emailed and not webhooks:
        if mail_failed or hook_failed:
            _attempt_failed(incident_id, sorted(set(mail_failed + hook_failed)))
        else:
            _settle(incident_id, ReviewNotice.Outcome.NOBODY)
        return reached
    with transaction.atomic():
        trail.lock_chain(incident.workspace_id)
        if not incident.audit_events.filter(action=AuditAction.REVIEWERS_NOTIFIED).exists():
            trail.record(action=AuditAction.REVIEWERS_NOTIFIED, subject_type="incident", subject_id=incident.pk,
                         via=Via.WORKER, reason="the repair's cases are ready for review",
                         incident_id=incident.pk, data={**reached, "cases": event["cases"],
                                                        "items": event["items"]})
        _settle(incident_id, ReviewNotice.Outcome.SENT)
    return reached


def _settle(incident_id: int, outcome: str) -> None:
    ReviewNotice.objects.filter(incident_id=incident_id, settled_at__isnull=True).update(
        settled_at=timezone.now(), outcome=outcome, attempts=F("attempts") + 1, last_error="")


def _attempt_failed(incident_id: int, errors: list[str]) -> None:
    """Nobody was reached though someone was there to tell: owed still, tried again after a wait that
    doubles with each attempt (from one sweep interval up to RETRY_CAP_SECONDS)."""
    notice = ReviewNotice.objects.filter(incident_id=incident_id, settled_at__isnull=True).first()
    if notice is None:
        return
    wait = min(settings.KINTSUGI_SWEEP_SECONDS * 2 ** notice.attempts, RETRY_CAP_SECONDS)
    ReviewNotice.objects.filter(pk=notice.pk, settled_at__isnull=True).update(
        attempts=F("attempts") + 1, next_attempt_at=timezone.now() + timedelta(seconds=wait),
        last_error="; ".join(errors)[:300])


def expect_task(incident_id: int) -> None:
    """The notice's task is about to be enqueued: the sweep leaves the notice to it for one sweep interval,
    then sends it itself if it is still owed (the broker refused the task, or no worker ran it)."""
    ReviewNotice.objects.filter(incident_id=incident_id, settled_at__isnull=True).update(
        next_attempt_at=timezone.now() + timedelta(seconds=settings.KINTSUGI_SWEEP_SECONDS))


def due_now(incident_id: int) -> None:
    """The notice's task was refused: the next sweep sends the notice."""
    ReviewNotice.objects.filter(incident_id=incident_id, settled_at__isnull=True).update(next_attempt_at=timezone.now())


def owed(*, now=None):
    """Notices owed whose incident's drafting is done (its `compensations` count set) and whose time came."""
    return (ReviewNotice.objects.filter(settled_at__isnull=True, next_attempt_at__lte=now or timezone.now(),
                                        incident__compensations__isnull=False)
            .order_by("next_attempt_at", "incident_id"))


def send_owed_notices(*, now=None) -> list[int]:
    """The sweep: send each owed notice whose time came, here (not through the broker, which may be the
    reason it is owed). Returns the incidents whose reviewers were reached. Safe to run twice, and beside
    the notice's own task: one sender per incident at a time, and a told incident is told nothing again."""
    told = []
    for incident_id in list(owed(now=now).values_list("incident_id", flat=True)[:SWEEP_LIMIT]):
        try:
            reached = notify_reviewers(incident_id=incident_id)
        except Exception:  # noqa: BLE001 - one incident's failure never stops the sweep's others
            log.exception("review notice of incident %s: the sweep could not send it", incident_id)
            continue
        if reached and (reached["emailed"] or reached["webhooks"]):
            told.append(incident_id)
    return told
