"""The reviewer's desk by case: the canonical incident's items grouped into its tickets' cases, an email
that explains a reversal never leaving before it, case decisions through the item services, and the
next undecided case opening after a decision."""
from __future__ import annotations

import pytest
from django.urls import reverse

from compensation.review import cases as case_selectors
from compensation.review.case_decisions import decide_case
from compensation.delivery.execution import execute_approved, execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import DecisionRefused, approve_item, reject_item
from provenance.models import OutboxEmail

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status
CASES = "admin:compensation_compensationitem_cases"


def _item(incident, kind, ticket):
    return incident.compensation_items.get(kind=kind, ticket_id=ticket)


def _case_url(incident, ticket):
    return reverse("admin:compensation_compensationitem_case", args=[incident.pk, ticket])


def _decide_url(incident, ticket):
    return reverse("admin:compensation_compensationitem_case_decide", args=[incident.pk, ticket])


def _mail_of(item) -> int:
    return OutboxEmail.objects.filter(idempotency_key=f"compensation:{item.pk}").count()


def test_the_canonical_incident_is_five_cases_of_its_ten_items(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    found = case_selectors.cases(user=reviewer, incident=incident)
    assert [c.ticket for c in found] == ["t04", "t05", "t06", "t07", "t08"]
    assert sum(len(c.items) for c in found) == 10 == incident.compensation_items.count()
    # Each case leaves in order: the money, then the one message that explains it and carries the new answer.
    assert [c.item.kind for c in found[0].items] == [K.REFUND_REVERSAL, K.CORRECTION_EMAIL]
    assert [c.item.kind for c in found[1].items] == [K.REFUND_REVERSAL, K.CORRECTION_EMAIL]
    assert {c.ticket: c.at_stake for c in found} == {"t04": "$55.00", "t05": "$75.00", "t06": "$90.00",
                                                     "t07": "$100.00", "t08": "$80.00"}
    totals = case_selectors.totals(found)
    assert totals["left"] == 5 and totals["items"] == 10 and totals["pending_items"] == 10
    assert totals["money"] == [{"currency": "USD", "cents": 40000, "text": "$400.00"}]
    assert found[1].summary == "Refunded $75.00 in full under the flagged rule; under the clean policy: reply, no refund"
    assert found[0].summary.startswith("Refunded $110.00 in full under the flagged rule; under the clean policy: ")
    assert "$55.00" in found[0].summary


def test_a_decided_case_goes_behind_the_cases_that_need_a_decision(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    decide_case(case=case_selectors.case(user=reviewer, incident_id=incident.pk, ticket="t04"), actor=reviewer,
                decision="reject", reason="handled by phone", via="admin")
    found = case_selectors.cases(user=reviewer, incident=incident)
    assert [c.ticket for c in found] == ["t05", "t06", "t07", "t08", "t04"]
    assert case_selectors.totals(found)["left"] == 4
    assert [c.ticket for c in case_selectors.cases(user=reviewer, incident=incident, status="pending")][0] == "t05"
    assert found[-1].at_stake_cents == 0  # a rejected reversal moves nothing


def test_an_email_approved_before_its_reversal_waits_and_leaves_once_after_it(
        canonical, eager_celery, outbox_backend, django_capture_on_commit_callbacks, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    email, reversal = _item(incident, K.CORRECTION_EMAIL, "t04"), _item(incident, K.REFUND_REVERSAL, "t04")
    sent_before = OutboxEmail.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=email, actor=reviewer, reason="reads well", via="admin")
    email.refresh_from_db()
    assert email.status == St.APPROVED and OutboxEmail.objects.count() == sent_before
    assert execute_approved() == 0 and OutboxEmail.objects.count() == sent_before  # the sweep holds it too
    client.force_login(reviewer)
    page = client.get(_case_url(incident, "t04")).content.decode()
    assert "waits for the reversal" in page
    item_page = client.get(reverse("admin:compensation_compensationitem_change", args=[email.pk])).content.decode()
    assert f'waits for the refund reversal request <a href="/admin/compensation/compensationitem/{reversal.pk}/change/">' in item_page
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=reversal, actor=reviewer, reason="ok", via="admin")
    email.refresh_from_db()
    assert email.status == St.EXECUTED and _mail_of(email) == 1
    assert OutboxEmail.objects.count() == sent_before + 1
    execute_item(item_id=email.pk)
    execute_approved()
    assert _mail_of(email) == 1


def test_rejecting_a_reversal_marks_the_emails_that_speak_of_it(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    reject_item(item=_item(incident, K.REFUND_REVERSAL, "t05"), actor=reviewer, reason="customer kept the goods",
                via="admin")
    email = _item(incident, K.CORRECTION_EMAIL, "t05")
    # It carries the reply "this order does not qualify for a refund": untrue while the customer keeps it.
    assert not email.valid and "which was rejected" in email.problems[-1]
    with pytest.raises(DecisionRefused, match="was rejected"):
        approve_item(item=email, actor=reviewer, reason="", via="admin")
    client.force_login(reviewer)
    page = client.get(_case_url(incident, "t05")).content.decode()
    assert page.count("was rejected: reject this email, or edit it so it stands alone") == 1
    assert case_selectors.case(user=reviewer, incident_id=incident.pk, ticket="t05").leaving == []


def test_an_email_held_behind_a_reversal_that_is_then_rejected_is_reopened_with_a_warning(
        canonical, client, eager_celery, outbox_backend, django_capture_on_commit_callbacks):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    reversal, email = _item(incident, K.REFUND_REVERSAL, "t07"), _item(incident, K.CORRECTION_EMAIL, "t07")
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=email, actor=reviewer, reason="reads well", via="admin")
    assert _item(incident, K.CORRECTION_EMAIL, "t07").status == St.APPROVED  # held: not sent
    client.force_login(reviewer)
    response = client.post(_decide_url(incident, "t07"), {"item": reversal.pk, "decision": "reject",
                                                           "reason": "the customer returned the goods"}, follow=True)
    email.refresh_from_db()
    # Not left waiting for an approval that cannot come: back to a decision, saying why, never sent.
    assert email.status == St.PENDING and not email.valid and email.decided_by is None
    assert "which was rejected" in email.problems[-1] and _mail_of(email) == 0
    warnings = [str(m) for m in response.context["messages"] if m.level_tag == "warning"]
    assert any(f"#{email.pk}" in w and "will not go out as written" in w for w in warnings), warnings
    assert AuditEvent.objects.filter(subject_id=str(email.pk), action="item.reopened", from_status="approved",
                                     to_status="pending").exists()
    case = case_selectors.case(user=reviewer, incident_id=incident.pk, ticket="t07")
    assert case.state == "needs decision" and case.leaving == []
    with django_capture_on_commit_callbacks(execute=True):
        reject_item(item=email, actor=reviewer, reason="nothing to correct now", via="admin")
    assert _mail_of(email) == 0


def test_a_reply_waits_for_the_reversal_of_its_ticket_and_leaves_once_after_it(
        canonical, eager_celery, outbox_backend, django_capture_on_commit_callbacks):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    # The reply rides in the case's one message (compensation.drafting), which waits for the reversal.
    reply, reversal = _item(incident, K.CORRECTION_EMAIL, "t06"), _item(incident, K.REFUND_REVERSAL, "t06")
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=reply, actor=reviewer, reason="fine", via="admin")
    assert _mail_of(reply) == 0
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=reversal, actor=reviewer, reason="ok", via="admin")
    reply.refresh_from_db()
    assert reply.status == St.EXECUTED and _mail_of(reply) == 1


def test_the_case_page_says_what_leaves_in_order_before_confirming(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    page = client.get(_case_url(incident, "t05")).content.decode()
    leaving = page[page.index('id="leaving"'):page.index("</ol>", page.index('id="leaving"'))]
    steps = leaving.split("<li")[1:]
    assert len(steps) == 2
    assert "a reversal request of $75.00" in steps[0]
    reversal = _item(incident, K.REFUND_REVERSAL, "t05")
    assert "A correction to our earlier message" in steps[1] and f"only after #{reversal.pk} is approved" in steps[1]
    assert "cents" not in page and page.index('id="leaving"') < page.index('id="approve-case"')


def test_approving_a_case_opens_the_next_undecided_case(canonical, client, django_capture_on_commit_callbacks):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(_decide_url(incident, "t04") + f"?incident={incident.pk}", {"decision": "approve_all"})
    assert response.status_code == 302
    assert response["Location"] == _case_url(incident, "t05") + f"?incident={incident.pk}"
    assert set(incident.compensation_items.filter(ticket_id="t04").values_list("status", flat=True)) == {St.APPROVED}
    # Item by item: the case stays open until its last item is decided, then the next one opens.
    email = _item(incident, K.CORRECTION_EMAIL, "t05")
    response = client.post(_decide_url(incident, "t05"), {"decision": "reject", "item": email.pk, "reason": "no"})
    assert response["Location"] == _case_url(incident, "t05")
    for ticket in ("t05", "t06", "t07"):
        with django_capture_on_commit_callbacks(execute=False):
            client.post(_decide_url(incident, ticket), {"decision": "reject_all", "reason": "by phone"})
    response = client.post(_decide_url(incident, "t08"), {"decision": "reject_all", "reason": "by phone"})
    assert response["Location"] == reverse(CASES)
    page = client.get(reverse(CASES), {"incident": incident.pk}).content.decode()
    assert "No cases left" in page


def test_a_case_decision_keeps_four_eyes(canonical, client):
    incident, flagger = canonical.incident, canonical.people.lead_reviewer
    client.force_login(flagger)
    client.post(_decide_url(incident, "t06"), {"decision": "approve_all"})
    assert set(incident.compensation_items.filter(ticket_id="t06").values_list("status", flat=True)) == {St.PENDING}


def test_rejecting_a_case_needs_a_reason(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    response = client.post(_decide_url(incident, "t06"), {"decision": "reject_all", "reason": " "}, follow=True)
    assert "a reason is required" in response.content.decode()
    assert set(incident.compensation_items.filter(ticket_id="t06").values_list("status", flat=True)) == {St.PENDING}


def test_a_case_of_another_workspace_is_a_404(canonical, client, make_user):
    from core.roles import REVIEWER

    outsider = make_user("outsider1", REVIEWER)  # in no workspace
    client.force_login(outsider)
    assert client.get(_case_url(canonical.incident, "t04")).status_code == 404
    assert client.post(_decide_url(canonical.incident, "t04"), {"decision": "approve_all"}).status_code == 404
    assert client.get(reverse(CASES), {"incident": canonical.incident.pk}).status_code == 404
    assert set(canonical.incident.compensation_items.values_list("status", flat=True)) == {St.PENDING}


def test_the_dashboard_and_the_incident_page_open_the_cases(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    board = client.get(reverse("admin:index")).content.decode()
    assert f'href="{reverse(CASES)}" id="review-cases-link"' in board
    page = client.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode()
    assert f'href="{reverse(CASES)}?incident={incident.pk}"' in page
    cases_page = client.get(reverse(CASES), {"incident": incident.pk}).content.decode()
    assert "5 cases left" in cases_page and "$400.00" in cases_page and "cents" not in cases_page
    assert "10 compensation drafts + 0 held replacements = 10 items, 10 pending" in cases_page


def test_an_email_edited_after_its_reversal_was_rejected_stands_alone_and_leaves(
        canonical, eager_celery, outbox_backend, django_capture_on_commit_callbacks):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    reject_item(item=_item(incident, K.REFUND_REVERSAL, "t06"), actor=reviewer, reason="kept", via="admin")
    email = _item(incident, K.CORRECTION_EMAIL, "t06")
    body = "Hello, please disregard our earlier message about ticket t06. You keep your refund."
    with django_capture_on_commit_callbacks(execute=True):
        approve_item(item=email, actor=reviewer, reason="rewritten", via="admin",
                     edits={"to": email.to, "subject": email.subject, "body": body})
    email.refresh_from_db()
    assert email.status == St.EXECUTED and _mail_of(email) == 1
