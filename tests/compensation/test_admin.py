import csv
import io
import json

import pytest
from django.urls import reverse

from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import reject_item
from provenance.models import Source, Ticket

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind
PAGE_SCRIPT = "<script>alert('page')</script>"
TICKET_SCRIPT = "<script>alert('ticket')</script><a href=\"javascript:alert(1)\">x</a>"
MODEL_SCRIPT = "<script>alert('model')</script> javascript:alert(2)"
CHANGELIST = "admin:compensation_compensationitem_changelist"


@pytest.fixture
def people(canonical):
    return canonical.people


def _item(incident, kind=K.CORRECTION_EMAIL, ticket="t05"):
    return incident.compensation_items.get(kind=kind, ticket_id=ticket)


def _page(client, user, url, **params):
    client.force_login(user)
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


@pytest.fixture
def poisoned(canonical):
    """Script tags and javascript: links in the page content, a ticket body and the model's output."""
    incident = canonical.incident
    Source.objects.filter(workspace=incident.workspace, source_id=incident.source_id).update(content=PAGE_SCRIPT)
    Ticket.objects.filter(workspace=incident.workspace, ticket_id="t05").update(body=TICKET_SCRIPT)
    item = _item(incident)
    original = [{**e, "details": {**e["details"], "body": MODEL_SCRIPT}} for e in item.original]
    CompensationItem.objects.filter(pk=item.pk).update(body=MODEL_SCRIPT, subject=MODEL_SCRIPT, original=original,
                                                       problems=[f"body: {MODEL_SCRIPT}"], valid=False)
    reject_item(item=_item(incident, K.REFUND_REVERSAL), actor=canonical.people.reviewer, reason=MODEL_SCRIPT, via="admin")
    return incident


def _assert_escaped(html: str):
    assert "<script>alert" not in html
    assert 'href="javascript:' not in html
    assert "&lt;script&gt;alert(" in html


def test_untrusted_text_is_escaped_in_every_admin_view_and_export(client, poisoned, people):
    item = _item(poisoned)
    poisoned.workspace.members.add(people.auditor)  # the audit trail shows the auditor's workspaces only
    review = _page(client, people.reviewer, reverse("admin:compensation_compensationitem_change", args=[item.pk]))
    _assert_escaped(review)
    for needle in ("&lt;script&gt;alert(&#x27;page&#x27;)", "&lt;script&gt;alert(&#x27;ticket&#x27;)",
                   "&lt;script&gt;alert(&#x27;model&#x27;)"):
        assert needle in review
    _assert_escaped(_page(client, people.reviewer, reverse(CHANGELIST)))
    _assert_escaped(_page(client, people.reviewer, reverse("admin:compensation_compensationitem_case",
                                                           args=[poisoned.pk, "t05"])))
    _assert_escaped(_page(client, people.reviewer, reverse(CHANGELIST), q="<script>alert('q')</script>") + "&lt;script&gt;alert(")
    _assert_escaped(_page(client, people.auditor, reverse("admin:compensation_auditevent_changelist")))
    _assert_escaped(_page(client, people.auditor, reverse("admin:compensation_auditevent_changelist"),
                          incident__id__exact=poisoned.pk))
    client.force_login(people.reviewer)
    confirm = client.post(reverse(CHANGELIST), {"action": "bulk_approve", "_selected_action": [item.pk]})
    _assert_escaped(confirm.content.decode() + "&lt;script&gt;alert(")
    assert "<script>alert" not in confirm.content.decode()
    client.force_login(people.auditor)
    export = reverse("admin:compensation_auditevent_export")
    for fmt in ("csv", "json"):
        response = client.get(export, {"incident__id__exact": poisoned.pk, "format": fmt})
        body = response.content.decode()
        assert response.status_code == 200 and response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Disposition"].startswith("attachment")
        if fmt == "json":
            assert "<script>" not in body  # JSON writes "<" as \u003c
        else:  # the CSV holds the text itself (no entities): a download (attachment, nosniff), never a page
            assert MODEL_SCRIPT in body
        assert "javascript:alert" in body.replace("\\u003c", "<")  # kept, but inert


def test_queue_lists_pending_first_and_filters(client, canonical, people):
    incident = canonical.incident
    decided = _item(incident, K.REFUND_REVERSAL, "t08")
    reject_item(item=decided, actor=people.reviewer, reason="manual refund already reversed", via="admin")
    client.force_login(people.reviewer)
    response = client.get(reverse(CHANGELIST))
    items = list(response.context["cl"].result_list)
    assert items[-1].pk == decided.pk and all(i.status == "pending" for i in items[:-1])
    for params, expected in [({"incident__id__exact": incident.pk}, 10), ({"kind__exact": "refund_reversal"}, 5),
                             ({"status__exact": "pending"}, 9), ({"customer": "dev.patel@customers.example"}, 2),
                             # t08's one message (its correction, carrying the reply) spoke of the rejected
                             # reversal: no longer approvable as written
                             ({"valid__exact": "1"}, 9)]:
        response = client.get(reverse(CHANGELIST), params)
        assert response.context["cl"].result_count == expected, params
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "$55.00" in page  # t04: the netted difference


def _decide(client, user, item, **data):
    client.force_login(user)
    return client.post(reverse("admin:compensation_compensationitem_decide", args=[item.pk]), data, follow=True)


def test_reviewer_approves_rejects_and_edits_in_the_admin(client, canonical, people):
    incident = canonical.incident
    a, b, c = _item(incident, K.REFUND_REVERSAL, "t06"), _item(incident, K.CORRECTION_EMAIL, "t06"), _item(incident, K.CORRECTION_EMAIL, "t07")
    _decide(client, people.reviewer, a, decision="approve", reason="")
    response = _decide(client, people.reviewer, b, decision="reject", reason="")
    assert "reason is required" in response.content.decode()
    _decide(client, people.reviewer, b, decision="reject", reason="phone call instead")
    _decide(client, people.reviewer, c, decision="edit_approve", subject="Our correction for ticket t07", body=c.body,
            to=c.to, reason="clearer subject")
    statuses = {i.pk: (i.status, i.edited) for i in CompensationItem.objects.filter(pk__in=[a.pk, b.pk, c.pk])}
    assert statuses == {a.pk: ("approved", False), b.pk: ("rejected", False), c.pk: ("approved", True)}
    edit = AuditEvent.objects.get(action="item.edited", subject_id=str(c.pk))
    assert edit.via == "admin" and edit.data["changes"]["subject"]["after"] == "Our correction for ticket t07"


def test_reviewer_edits_an_amount_as_money_not_cents(client, canonical, people):
    item = _item(canonical.incident, K.REFUND_REVERSAL, "t04")  # the netting allows 55.00 back
    page = _page(client, people.reviewer, reverse("admin:compensation_compensationitem_change", args=[item.pk]))
    assert 'name="amount" value="55.00"' in page and "Amount in USD" in page
    response = _decide(client, people.reviewer, item, decision="edit_approve", amount="fifty", body=item.body,
                       reason="typo")
    assert "amount must be an amount of money" in response.content.decode()
    assert CompensationItem.objects.get(pk=item.pk).status == "pending"
    _decide(client, people.reviewer, item, decision="edit_approve", amount="50.00", body=item.body,
            reason="the customer keeps 5.00 of goodwill")
    edited = CompensationItem.objects.get(pk=item.pk)
    assert (edited.status, edited.amount_cents, edited.edited) == ("approved", 5000, True)


def test_the_flagger_is_refused_in_the_admin_by_the_service(client, canonical, people):
    item = _item(canonical.incident)
    page = _page(client, people.lead_reviewer, reverse("admin:compensation_compensationitem_change", args=[item.pk]))
    assert 'id="approve-form"' in page  # the button is there (they hold the role) ...
    response = _decide(client, people.lead_reviewer, item, decision="approve", reason="mine")
    assert "four-eyes" in response.content.decode()  # ... but the service refuses
    assert CompensationItem.objects.get(pk=item.pk).status == "pending"
    assert AuditEvent.objects.filter(action="item.refused", actor=people.lead_reviewer, via="admin").count() == 1


def test_auditor_reads_history_and_exports_but_cannot_decide(client, canonical, people):
    incident = canonical.incident
    incident.workspace.members.add(people.auditor)  # the audit trail shows the auditor's workspaces only
    item = _item(incident)
    page = _page(client, people.auditor, reverse("admin:compensation_compensationitem_change", args=[item.pk]))
    assert not any(f'id="{form}-form"' in page for form in ("approve", "reject", "edit", "redraft"))
    assert 'id="history-table"' in page and "Item: drafted" in page  # the history reads in words (core.wording)
    response = _decide(client, people.auditor, item, decision="approve", reason="x")
    assert "Reviewer role" in response.content.decode() and CompensationItem.objects.get(pk=item.pk).status == "pending"
    client.force_login(people.auditor)
    response = client.post(reverse(CHANGELIST), {"action": "bulk_approve", "_selected_action": [item.pk]})
    assert CompensationItem.objects.get(pk=item.pk).status == "pending"  # the action is not offered to them
    history = _page(client, people.auditor, reverse("admin:compensation_auditevent_changelist"),
                    incident__id__exact=incident.pk)
    assert "incident.flagged" in history and "Export CSV" in history
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("admin:compensation_auditevent_export"),
                                                      {"incident__id__exact": incident.pk}).content.decode())))
    assert rows[0]["action"] == "incident.flagged" and len(rows) == AuditEvent.objects.filter(incident=incident).count()
    data = json.loads(client.get(reverse("admin:compensation_auditevent_export"),
                                 {"subject_type": "compensation_item", "subject_id": item.pk, "format": "json"}).content)
    assert [e["action"] for e in data] == ["item.drafted", "item.refused"]
    client.force_login(people.lead)  # the support lead reads the trail but does not export it
    assert client.get(reverse("admin:compensation_auditevent_export")).status_code == 403
    assert "Export CSV" not in client.get(reverse("admin:compensation_auditevent_changelist")).content.decode()


def test_bulk_approve_shows_count_and_total_before_approving(client, canonical, people):
    incident = canonical.incident
    reversals = list(incident.compensation_items.filter(kind=K.REFUND_REVERSAL).order_by("pk"))
    email = _item(incident)
    selected = [i.pk for i in reversals] + [email.pk]
    client.force_login(people.reviewer)
    response = client.post(reverse(CHANGELIST), {"action": "bulk_approve", "_selected_action": selected})
    page = response.content.decode()
    assert response.status_code == 200 and "bulk-approve-confirmation" in page
    assert response.context["count"] == 6 and response.context["totals"] == {"USD": 5500 + 7500 + 9000 + 10000 + 8000}
    assert 'id="bulk-total">$400.00</strong>' in page
    assert incident.compensation_items.filter(status="approved").count() == 0  # nothing happened yet
    client.post(reverse(CHANGELIST), {"action": "bulk_approve", "_selected_action": selected, "confirm": "yes",
                                      "reason": "matches the payments export"})
    assert set(incident.compensation_items.filter(status="approved").values_list("pk", flat=True)) == set(selected)
    assert AuditEvent.objects.filter(action="item.approved", reason="matches the payments export").count() == 6
