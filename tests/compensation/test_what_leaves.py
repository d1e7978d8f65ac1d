"""What leaves, shown as it leaves: every message's recipient, subject and text on the case page, in the
bulk confirmation (one sample per template, "N like this"), in the API and MCP; the exact message opens
as plain text; and a decision is bound to what the page showed: an edit after the page was shown makes
the approval fail, nothing approved, nothing sent."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from compensation.delivery import approval, messages

from compensation.review import cases as case_selectors
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import DecisionRefused
from kintsugi_site import mcp_server
from tests.helpers import api_key, create_user

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _case_url(incident, ticket):
    return reverse("admin:compensation_compensationitem_case", args=[incident.pk, ticket])


def _decide_url(incident, ticket):
    return reverse("admin:compensation_compensationitem_case_decide", args=[incident.pk, ticket])


def _hidden(page: str, name: str, after: str = "") -> str:
    start = page.index(after) if after else 0
    return re.search(rf'name="{name}" value="([^"]*)"', page[start:]).group(1)


def test_the_case_page_shows_every_message_in_full_and_escaped(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    email = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t05")
    CompensationItem.objects.filter(pk=email.pk).update(body=f"Hello,\nwe were wrong. {EVIL}")
    client.force_login(reviewer)
    page = client.get(_case_url(incident, "t05")).content.decode()
    section = page[page.index('id="case-messages"'):]
    assert email.subject in section and "we were wrong." in section
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in section
    reversal = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t05")
    assert reversal.body and reversal.body.split(".")[0] in section  # the note to payments is shown too
    # The exact message opens as plain text: nothing in it can run.
    exact = client.get(reverse("admin:compensation_compensationitem_message", args=[email.pk]))
    assert exact["Content-Type"].startswith("text/plain") and exact["X-Content-Type-Options"] == "nosniff"
    assert exact.content.decode() == f"To: {email.customer_email}\nSubject: {email.subject}\n\nHello,\nwe were wrong. {EVIL}\n"


def test_another_workspaces_message_is_a_404(canonical, client):
    outsider = create_user("outsider-reviewer", "Reviewer")
    email = canonical.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL).first()
    client.force_login(outsider)
    assert client.get(reverse("admin:compensation_compensationitem_message", args=[email.pk])).status_code == 404


def test_an_edit_after_the_case_page_was_shown_voids_its_approval(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    email = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t04")
    client.force_login(reviewer)
    page = client.get(_case_url(incident, "t04")).content.decode()
    case_shown = _hidden(page, "shown", after='id="approve-case"')
    item_shown = _hidden(page, "shown", after=f'name="item" value="{email.pk}"')
    assert item_shown == approval.content_hash(email)
    # Someone edits the body after the page was shown: the reviewer never read the new text.
    CompensationItem.objects.filter(pk=email.pk).update(body=email.body + " Also, send us your password.")
    client.post(_decide_url(incident, "t04"), {"decision": "approve_all", "shown": case_shown})
    assert not incident.compensation_items.filter(ticket_id="t04", status=St.APPROVED).exists()
    client.post(_decide_url(incident, "t04"), {"decision": "approve", "item": email.pk, "shown": item_shown})
    email.refresh_from_db()
    assert email.status == St.PENDING and not email.approved_hash
    refused = AuditEvent.objects.filter(action="item.refused", subject_id=str(email.pk)).latest("seq")
    assert "changed after it was shown" in refused.reason
    # Shown again, the new text can be approved (by someone who has read it).
    page = client.get(_case_url(incident, "t04")).content.decode()
    assert "send us your password" in page
    client.post(_decide_url(incident, "t04"), {"decision": "approve_all", "shown": _hidden(page, "shown", after='id="approve-case"')})
    assert incident.compensation_items.filter(ticket_id="t04", status=St.APPROVED).count() == 2


def test_the_bulk_confirmation_shows_one_sample_per_template_and_is_bound_to_it(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    bulk = reverse("admin:compensation_compensationitem_cases_bulk")
    keys = [f"{incident.pk}/{t}" for t in ("t04", "t05", "t06", "t07", "t08")]
    page = client.post(bulk, {"case": keys, "decision": "approve"}).content.decode()
    section = page[page.index('id="bulk-messages"'):page.index('id="bulk-cases-table"')]
    leaving = [c.item for t in ("t04", "t05", "t06", "t07", "t08")
               for c in case_selectors.case(user=reviewer, incident_id=incident.pk, ticket=t).leaving if c.message]
    found = messages.samples(leaving)
    counts = [int(n) for n in re.findall(r'data-count="(\d+)"', section)]
    assert sum(counts) == len(leaving) and len(counts) == len(found) < len(leaving)
    assert any(s.count > 1 for s in found) and f"{max(counts)} like this" in section
    for s in found:  # every template's text is there in full
        assert s.message.body.replace('"', "&quot;").replace("'", "&#x27;") in section
    shown = _hidden(page, "shown")
    # A body edited between the confirmation and the "Yes": nothing is approved.
    email = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t06")
    CompensationItem.objects.filter(pk=email.pk).update(body="Different words nobody read.")
    again = client.post(bulk, {"case": keys, "decision": "approve", "confirm": "yes", "shown": shown,
                               "reason": "read them all"}).content.decode()
    assert "Nothing approved" in again and "Different words nobody read." in again
    assert not incident.compensation_items.filter(status=St.APPROVED).exists()
    client.post(bulk, {"case": keys, "decision": "approve", "confirm": "yes", "shown": _hidden(again, "shown"),
                       "reason": "read them all"})
    assert incident.compensation_items.filter(status=St.APPROVED).exists()


def test_messages_of_one_template_group_and_a_different_one_stands_alone(canonical):
    emails = list(canonical.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL).order_by("pk"))
    by_situation = {}
    for e in emails:
        by_situation.setdefault(e.facts.get("situation"), []).append(e)
    same = next(group for group in by_situation.values() if len(group) > 1)
    found = messages.samples(same)
    assert [s.count for s in found] == [len(same)]
    odd = same[-1]
    odd.body = "A completely different letter."
    assert sorted(s.count for s in messages.samples(same)) == [1, len(same) - 1]


def test_the_api_and_mcp_show_the_message_and_bind_the_approval_to_its_hash(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    email = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t07")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_key(reviewer)}")
    shown = api.get(f"/api/v1/review-items/{email.pk}/").json()
    assert shown["message"] == {"item": email.pk, "kind": email.kind, "to": email.customer_email,
                                "subject": email.subject, "body": email.body, "content_hash": shown["content_hash"]}
    CompensationItem.objects.filter(pk=email.pk).update(subject="Changed after you read it")
    refused = api.post(f"/api/v1/review-items/{email.pk}/approve/", {"content_hash": shown["content_hash"]},
                       format="json")
    assert refused.status_code == 409 and "changed after it was shown" in str(refused.json())
    listed = mcp_server.review_items(user=reviewer, workspace=incident.workspace.name, incident=incident.pk,
                                     status="pending", limit=50, offset=0)
    entry = next(i for i in listed["items"] if i["id"] == email.pk)
    assert entry["message"]["subject"] == "Changed after you read it"
    with pytest.raises(DecisionRefused, match="changed after it was shown"):
        mcp_server.approve_item(user=reviewer, item=email.pk, reason="ok", content_hash=shown["content_hash"])
    reversal = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t07")
    mcp_server.approve_item(user=reviewer, item=reversal.pk, reason="ok", content_hash=approval.content_hash(reversal))
    done = mcp_server.approve_item(user=reviewer, item=email.pk, reason="read it", content_hash=entry["content_hash"])
    assert done["status"] == St.APPROVED
