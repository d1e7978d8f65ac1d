"""Telling a workspace's reviewers that a repair's cases are ready for review: one email to each reviewer
(with the link to their inbox, the incident's cases) and one signed event to each webhook the workspace
chose (compensation.delivery.connectors.webhook), once per incident.

Sent after the drafts are committed (compensation.receivers enqueues the task on commit), never from
inside the drafting transaction. Every connection goes through core.egress: the email through the
operator's relay or email backend (the smtp connector's own connection), the webhook through its POST.
Safe to run twice: the first run that reached anyone records `reviewers.notified` in the incident's audit
chain, and a run that finds it sends nothing. A send that fails is logged and the others still go; the
record says who was reached.
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import transaction
from django.urls import reverse

from compensation.delivery.connectors.base import DeliveryFailure, connector
from compensation.delivery.connectors.webhook import post
from compensation.delivery_models import WorkspaceConnector
from compensation.models import CompensationItem
from core import locks, secret_registry
from core.audit import trail
from core.locks import advisory_lock
from core.vocabulary import AuditAction, ItemStatus, Via
from provenance.access import capabilities
from repairs.models import Incident

log = logging.getLogger(__name__)
EVENT = "cases.ready"


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


def _email(incident: Incident, event: dict, people: list) -> list[str]:
    if not people:
        return []
    smtp = connector("smtp")
    if not smtp.configured({}, workspace=incident.workspace.name):
        return []
    subject = f"{event['cases']} cases to review in {event['workspace']}"
    body = (f"A repair of {event['workspace']} (incident #{incident.pk}, source {incident.source_id}) drafted "
            f"{event['items']} items in {event['cases']} cases. They are ready for your review:\n\n"
            f"{event['inbox']}\n")
    sent = []
    connection = smtp.operator_connection(workspace=incident.workspace.name)
    for person in people:
        try:
            EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[person.email],
                         connection=connection, headers={"X-Kintsugi-Incident": str(incident.pk)}).send()
            sent.append(person.username)
        except Exception as exc:  # noqa: BLE001 - one unreachable reviewer never stops the others
            log.warning("review notice to %s for incident %s failed: %s", person.username, incident.pk,
                        type(exc).__name__)
    return sent


def _webhooks(incident: Incident, event: dict) -> list[str]:
    """Each distinct webhook the workspace chose, once; returns the kinds whose webhook took the event."""
    hook = connector("webhook")
    reached, seen = [], set()
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
    return reached


def notify_reviewers(*, incident_id: int) -> dict | None:
    """Email the reviewers and post the event, once per incident; what was reached (None: already done)."""
    with advisory_lock(locks.NOTIFY_REVIEWERS, incident_id, wait=False) as mine:
        return _notify(incident_id) if mine else None  # another worker is telling them


def _notify(incident_id: int) -> dict | None:
    incident = Incident.objects.select_related("workspace").get(pk=incident_id)
    if incident.audit_events.filter(action=AuditAction.REVIEWERS_NOTIFIED).exists():
        return None
    event = cases_ready(incident)
    if not event["items"]:
        return {"emailed": [], "webhooks": []}
    reached = {"emailed": _email(incident, event, reviewers(incident)), "webhooks": _webhooks(incident, event)}
    if reached["emailed"] or reached["webhooks"]:
        with transaction.atomic():
            trail.lock_chain(incident.workspace_id)
            if not incident.audit_events.filter(action=AuditAction.REVIEWERS_NOTIFIED).exists():
                trail.record(action=AuditAction.REVIEWERS_NOTIFIED, subject_type="incident", subject_id=incident.pk,
                             via=Via.WORKER, reason="the repair's cases are ready for review",
                             incident_id=incident.pk, data={**reached, "cases": event["cases"],
                                                            "items": event["items"]})
    return reached
