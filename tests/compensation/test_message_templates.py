"""A workspace's customer message template: a closed set of placeholders filled as text (never run), saved
by the workspace's Support lead and audited, previewed against an incident's real drafts, and applied to
the incident's messages only before its first approval."""
from __future__ import annotations

import pytest

from compensation.drafting import customer_message
from compensation.drafting import templates
from compensation.delivery.approval import content_hash
from compensation.drafting.customer_message import Template, render, template_problems
from compensation.models import CompensationItem, MessageTemplate
from compensation.review.services import approve_item

K = CompensationItem.Kind
SUBJECT = "About your refund from $team"
BODY = "Dear $customer,\n\n$explanation\n\n$corrected_answer\n\nKind regards, the $team team"


@pytest.mark.parametrize("subject,body,problem", [
    ("Hi", "Hello $customer, $secret", "unknown placeholder $secret"),
    ("Hi", "Hello ${__class__}", "unknown placeholder $__class__"),
    ("Hi", "You owe $ 5", "a '$' that starts no placeholder"),
    ("Hi\nBcc: x@evil.example", "Hello", "subject: contains a line break"),
    ("", "Hello", "subject: empty"),
])
def test_a_template_outside_the_placeholder_set_is_refused(subject, body, problem):
    assert any(problem in p for p in template_problems(subject, body)), template_problems(subject, body)


def test_the_default_template_and_a_dollar_written_twice_pass():
    assert template_problems(customer_message.DEFAULT.subject, customer_message.DEFAULT.body) == []
    assert template_problems("Hi", "A fee of $$5 was waived, $customer.") == []


def test_values_are_inserted_as_text_never_read_as_a_template():
    facts = {"customer": "$back {{ settings.SECRET_KEY }} ${customer}", "currency": "EUR",
             "situation": "refund_withdrawn", "refunded_cents": 7500, "reverse_cents": 7500}
    subject, body = render(Template("For $customer", "$customer: $explanation"), facts)
    assert subject == "For $back {{ settings.SECRET_KEY }} ${customer}"
    assert body.startswith("$back {{ settings.SECRET_KEY }} ${customer}: ")
    assert "€75.00 back" in body  # money as the customer's currency is written


@pytest.mark.django_db
def test_the_lead_saves_the_template_audited_and_a_reviewer_may_not(canonical):
    ws, people = canonical.incident.workspace, canonical.people
    with pytest.raises(templates.TemplateRefused):
        templates.set_template(workspace=ws, subject=SUBJECT, body=BODY, actor=people.reviewer, reason="x", via="admin")
    with pytest.raises(ValueError, match="unknown placeholder"):
        templates.set_template(workspace=ws, subject=SUBJECT, body="$nope", actor=people.lead, reason="x", via="admin")
    row = templates.set_template(workspace=ws, subject=SUBJECT, body=BODY, actor=people.lead, reason="our voice",
                                 via="admin")
    row = templates.set_template(workspace=ws, subject=SUBJECT + "!", body=BODY, actor=people.lead, reason="louder",
                                 via="admin")
    assert row.version == 2 and MessageTemplate.objects.filter(workspace=ws).count() == 1
    events = list(ws.audit_events.filter(action="message_template.changed").order_by("seq"))
    assert [e.reason for e in events] == ["our voice", "louder"]
    assert events[0].data["before"]["version"] == 0 and events[0].data["after"]["body"] == BODY
    assert events[1].data["before"]["subject"] == SUBJECT and events[1].data["after"]["subject"] == SUBJECT + "!"


@pytest.mark.django_db
def test_preview_shows_the_real_drafts_in_the_new_words_and_writes_nothing(canonical):
    incident = canonical.incident
    before = {i.pk: content_hash(i) for i in incident.compensation_items.all()}
    rows = templates.preview(incident=incident, template=Template(SUBJECT, BODY))
    assert len(rows) == 5 and all(r.changes and not r.problems for r in rows)
    t05 = next(r for r in rows if r.item.ticket_id == "t05")
    assert t05.subject == f"About your refund from {incident.workspace.name}"
    assert t05.body.startswith(f"Dear {t05.item.facts['customer']},") and "$75.00 back" in t05.body
    assert {i.pk: content_hash(i) for i in incident.compensation_items.all()} == before


@pytest.mark.django_db
def test_applying_redrafts_the_messages_until_the_first_approval(canonical):
    incident, people = canonical.incident, canonical.people
    templates.set_template(workspace=incident.workspace, subject=SUBJECT, body=BODY, actor=people.lead,
                           reason="our voice", via="admin")
    mail = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t06")
    old_hash = content_hash(mail)
    assert templates.apply_to_incident(incident=incident, actor=people.lead, reason="", via="admin") == 5
    mail.refresh_from_db()
    assert mail.valid and mail.subject.startswith("About your refund from") and content_hash(mail) != old_hash
    assert mail.drafted_by == "kintsugi (message template v1)"
    assert incident.audit_events.filter(action="item.redrafted").count() == 5
    reversal = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t06")
    approve_item(item=reversal, actor=people.reviewer, reason="ok", via="admin")
    with pytest.raises(templates.TemplateRefused, match="already has an approved item"):
        templates.apply_to_incident(incident=incident, actor=people.lead, reason="", via="admin")


@pytest.mark.django_db
def test_the_template_page_previews_escaped_and_is_the_leads_only(canonical, client):
    incident, people = canonical.incident, canonical.people
    url = f"/admin/compensation/messagetemplate/workspace/{incident.workspace_id}/"
    client.force_login(people.reviewer)
    assert client.get(url).status_code == 403
    client.force_login(people.lead)
    page = client.get(url)
    assert page.status_code == 200 and "$explanation" in page.content.decode()
    answer = client.post(url, {"subject": SUBJECT, "body": "<b>$customer</b> $explanation", "reason": "",
                               "incident": str(incident.pk), "step": "preview"})
    html = answer.content.decode()
    assert answer.status_code == 200 and "<b>" not in html and "&lt;b&gt;" in html
    assert html.count('class="preview-row') == 5
    assert not MessageTemplate.objects.filter(workspace=incident.workspace).exists()  # a preview saves nothing


@pytest.mark.django_db
def test_a_redraft_uses_the_workspaces_template_not_the_model(canonical):
    from compensation.review.services import redraft_item

    incident, people = canonical.incident, canonical.people
    templates.set_template(workspace=incident.workspace, subject=SUBJECT, body=BODY, actor=people.lead,
                           reason="our voice", via="admin")
    mail = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t07")
    mail = redraft_item(item=mail, actor=people.reviewer, reason="in our words", via="admin")
    assert mail.valid and mail.subject == f"About your refund from {incident.workspace.name}"
    assert mail.body.endswith(f"Kind regards, the {incident.workspace.name} team")
    assert mail.drafted_by == "kintsugi (message template v1)"
