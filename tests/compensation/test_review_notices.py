"""When a repair's cases are ready, the workspace's reviewers get an email with their inbox link (through
a real SMTP server, aiosmtpd) and the workspace's signed webhook gets one event; once per incident. The
notice is owed in Postgres from the drafting transaction on, so a broker that refuses its task loses
nothing: the sweep sends it."""
from __future__ import annotations

import pytest
from django.utils import timezone

from compensation.delivery.connectors import webhook
from compensation.models import CompensationItem, ReviewNotice
from compensation.notices import EVENT, inbox_url, notify_reviewers, send_owed_notices
from tests.helpers import free_port
from tests.compensation.delivery_support import desk, fake_stripe, smtp_server, use_connectors  # noqa: F401
from tests.compensation.test_delivery_webhooks import receiver  # noqa: F401

K = CompensationItem.Kind
pytestmark = pytest.mark.django_db


def _addresses(people):
    for name in ("lead", "reviewer", "auditor", "lead_reviewer"):
        user = getattr(people, name)
        user.email = f"{user.username}@support.example"
        user.save(update_fields=["email"])


def test_reviewers_get_their_inbox_link_and_the_webhook_one_signed_event_once(desk, receiver, settings):
    settings.KINTSUGI_PUBLIC_URL = "https://kintsugi.support.example"
    _addresses(desk.people)
    hook = {"url": receiver.url}
    use_connectors(desk.incident.workspace_id, **{K.REFUND_REVERSAL: ("webhook", hook),
                                                  K.CORRECTION_EMAIL: ("webhook", hook)})
    reached = notify_reviewers(incident_id=desk.incident.pk)
    # Only the people who may review are told: the lead and the auditor are not.
    assert reached["emailed"] == ["leadrev1", "reviewer1"]
    mails = desk.smtp.mailbox.messages
    assert sorted(m["To"] for m in mails) == ["leadrev1@support.example", "reviewer1@support.example"]
    link = inbox_url(desk.incident)
    assert link == (f"https://kintsugi.support.example/admin/compensation/compensationitem/cases/"
                    f"?incident={desk.incident.pk}")
    assert all(link in m.get_payload() for m in mails)
    assert "10 items in 5 cases" in mails[0].get_payload()
    # One event for the one receiver both kinds name, signed with the workspace's secret.
    assert len(receiver.got) == 1
    ok, key, event, status = receiver.got[0]
    assert ok and status == 200 and key == f"{EVENT}:{desk.incident.pk}"
    assert event == {"type": EVENT, "workspace": desk.incident.workspace.name, "incident": desk.incident.pk,
                     "source": desk.incident.source_id, "cases": 5, "items": 10, "inbox": link}
    notice = desk.incident.audit_events.get(action="reviewers.notified")
    assert notice.data["emailed"] == ["leadrev1", "reviewer1"]
    # A second delivery of the task tells nobody again.
    assert notify_reviewers(incident_id=desk.incident.pk) is None
    assert len(desk.smtp.mailbox.messages) == 2 and len(receiver.got) == 1


def test_a_receiver_that_cannot_verify_the_signature_is_seen_failing(desk, receiver, monkeypatch):
    # The red case of the signature: signed with another key, the receiver's check refuses it.
    monkeypatch.setenv("KINTSUGI_WEBHOOK_SECRET", "not-the-receivers-secret")
    use_connectors(desk.incident.workspace_id, **{K.REFUND_REVERSAL: ("webhook", {"url": receiver.url})})
    reached = notify_reviewers(incident_id=desk.incident.pk)
    assert reached["webhooks"] == []  # the receiver answered 401: not counted as reached
    ok, _, event, status = receiver.got[0]
    assert not ok and status == 401 and event["type"] == EVENT
    assert not webhook.verify(b"{}", "t=1,v1=00", "hook-secret")


def test_nothing_configured_sends_nothing_and_records_nothing(canonical, settings):
    settings.EMAIL_HOST, settings.KINTSUGI_EMAIL_BACKEND = "", ""
    assert notify_reviewers(incident_id=canonical.incident.pk) == {"emailed": [], "webhooks": []}
    assert not canonical.incident.audit_events.filter(action="reviewers.notified").exists()
    # Nobody to tell is an answer, not a failure: the sweep does not try it again every interval.
    assert ReviewNotice.objects.get(incident=canonical.incident).outcome == ReviewNotice.Outcome.NOBODY


def test_finished_drafting_tells_the_reviewers_once_the_drafts_are_committed(desk, eager_celery,
                                                                              django_capture_on_commit_callbacks):
    from compensation.receivers import draft_planned_repair

    _addresses(desk.people)
    with django_capture_on_commit_callbacks(execute=False) as pending:
        assert draft_planned_repair(sender=None, incident=desk.incident, wait=True)  # every part drafted
    assert desk.smtp.mailbox.messages == []  # nothing leaves before the commit
    for callback in pending:
        callback()
    assert sorted(m["To"] for m in desk.smtp.mailbox.messages) == ["leadrev1@support.example",
                                                                    "reviewer1@support.example"]


def test_a_notice_the_broker_refused_stays_owed_and_the_sweep_sends_it(desk, dead_broker,
                                                                       django_capture_on_commit_callbacks):
    from compensation.receivers import draft_planned_repair

    _addresses(desk.people)
    notice = ReviewNotice.objects.get(incident=desk.incident)
    assert notice.settled_at is None  # owed since the transaction that committed the drafted items
    with dead_broker(), django_capture_on_commit_callbacks(execute=True):
        assert draft_planned_repair(sender=None, incident=desk.incident, wait=True)
    assert desk.smtp.mailbox.messages == []  # the broker refused the task: nothing was sent
    notice.refresh_from_db()
    assert notice.settled_at is None and notice.next_attempt_at <= timezone.now()
    assert send_owed_notices() == [desk.incident.pk]
    assert sorted(m["To"] for m in desk.smtp.mailbox.messages) == ["leadrev1@support.example",
                                                                    "reviewer1@support.example"]
    notice.refresh_from_db()
    assert notice.outcome == ReviewNotice.Outcome.SENT and notice.settled_at is not None
    assert desk.incident.audit_events.filter(action="reviewers.notified").count() == 1
    # Settled: the next sweep, and the task delivered late, tell nobody again.
    assert send_owed_notices() == [] and notify_reviewers(incident_id=desk.incident.pk) is None
    assert len(desk.smtp.mailbox.messages) == 2


def test_a_notice_that_reached_nobody_stays_owed_and_is_tried_again_later(desk, settings):
    _addresses(desk.people)
    settings.EMAIL_PORT = free_port()  # the mail relay is down
    assert notify_reviewers(incident_id=desk.incident.pk) == {"emailed": [], "webhooks": []}
    notice = ReviewNotice.objects.get(incident=desk.incident)
    assert notice.settled_at is None and notice.attempts == 1 and notice.next_attempt_at > timezone.now()
    assert notice.last_error.startswith("email: ")
    assert not desk.incident.audit_events.filter(action="reviewers.notified").exists()
    assert send_owed_notices() == []  # not due yet: it backs off
    settings.EMAIL_PORT = desk.smtp.port  # the relay is back
    assert send_owed_notices(now=notice.next_attempt_at) == [desk.incident.pk]
    assert len(desk.smtp.mailbox.messages) == 2
