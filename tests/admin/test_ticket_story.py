"""Before → after in a support lead's words, with the customer and what changed marked, on the incident
page, the case page, the item page and the report; an edited item's diff everywhere it is shown; the
ticket page listing its incidents, decisions and items, linked."""
import json
import re

from django.urls import reverse

from compensation.review import services as review
from compensation.models import CompensationItem
from provenance.models import Ticket
from kintsugi_site.reports import build_report, render_html, render_report
from repairs.ticket_story import build
from repairs.wording import human_decision

K = CompensationItem.Kind
MACHINE_SPEAK = re.compile(r"choice: |level: |template: |refund_confirmation")


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</table>", start)]


def test_decisions_read_as_a_support_lead_says_them():
    assert human_decision("triage", {"choice": "refund", "level": "full"}) == "a full refund"
    assert human_decision("triage", {"choice": "reply", "level": "none"}) == "a reply, no refund"
    assert human_decision("refund", {"amount": 7500, "level": "full"}, currency="USD") == "$75.00 refunded"
    assert human_decision("notifier", {"template": "refund_confirmation", "amount": 7500},
                          currency="USD") == "an email confirming the $75.00 refund"
    # An agent the wording does not know still reads, never as nothing.
    assert human_decision("fraud_check", {"score_band": "high"}) == "score_band: high"


def test_incident_page_tells_each_ticket_in_words_with_the_customer_and_marks_what_changed(lead_client, repaired):
    t05 = Ticket.objects.get(workspace=repaired.workspace, ticket_id="t05")
    html = lead_client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    table = _section(html, "ticket-table")
    row = table[table.index('data-ticket="t05"'):]
    row = row[:row.index("</tr>")]
    assert f'<strong class="customer">{t05.customer_name}</strong> (t05)' in row
    assert '<mark class="removed">a full refund</mark>' in row and '<mark class="removed">$75.00 refunded</mark>' in row
    assert '<mark class="added">a reply, no refund</mark>' in row
    assert MACHINE_SPEAK.search(table) is None, MACHINE_SPEAK.search(table)
    genuine = table[table.index('data-ticket="t01"'):]
    assert "<mark" not in genuine[:genuine.index("</tr>")]  # a genuine VIP: nothing changed, nothing marked


def test_the_case_item_and_report_tell_the_same_story(client, repaired, reviewer):
    client.force_login(reviewer)
    reversal = repaired.compensation_items.get(ticket_id="t05", kind=K.REFUND_REVERSAL)
    case = client.get(reverse("admin:compensation_compensationitem_case", args=[repaired.pk, "t05"])).content.decode()
    item = client.get(reverse("admin:compensation_compensationitem_change", args=[reversal.pk])).content.decode()
    report = json.loads(render_report(repaired, "json")[0])
    story = next(t["story"] for t in report["tickets"] if t["ticket"] == "t05")
    name = Ticket.objects.get(workspace=repaired.workspace, ticket_id="t05").customer_name
    assert story["text"].startswith(f"{name} (t05): before, a full refund; $75.00 refunded;")
    assert "After the repair: a reply, no refund;" in story["text"]
    for page in (case, item):
        assert 'class="ks-story changed"' in page and '<mark class="added">a reply, no refund</mark>' in page


def test_a_story_marks_nothing_when_nothing_changed():
    class Outcome:  # the two fields of an ActionOutcome the story reads, plus its status and order
        def __init__(self, agent, before, after, status, seq):
            self.agent, self.before, self.after, self.status, self.seq = agent, before, after, status, seq
    same = build("t01", [Outcome("triage", {"choice": "refund", "level": "full"},
                                 {"choice": "refund", "level": "full"}, "rerun_same", 1.0)], customer="A")
    assert not same.changed and same.text == "A (t01): before, a full refund. After the repair: a full refund."
    gone = build("t05", [Outcome("refund", {"amount": 100, "level": "full"}, None, "superseded", 2.0)],
                 currency="USD")
    assert gone.changed and gone.after == [] and gone.text.endswith("After the repair: nothing.")


def test_an_edited_item_shows_its_diff_on_the_item_case_and_report(client, repaired, reviewer):
    email = repaired.compensation_items.get(ticket_id="t04", kind=K.CORRECTION_EMAIL)
    reversal = repaired.compensation_items.get(ticket_id="t04", kind=K.REFUND_REVERSAL)
    drafted = email.body
    edited = drafted.replace("We are sorry for the confusion.", "We apologise for the mix-up.")
    assert edited != drafted
    review.approve_item(item=reversal, actor=reviewer, reason="ok", via="admin")
    review.approve_item(item=email, actor=reviewer, reason="warmer", via="admin",
                        edits={"to": email.to, "subject": email.subject, "body": edited})
    client.force_login(reviewer)
    pages = {
        "item": client.get(reverse("admin:compensation_compensationitem_change", args=[email.pk])).content.decode(),
        "case": client.get(reverse("admin:compensation_compensationitem_case", args=[repaired.pk, "t04"])).content.decode(),
    }
    for name, page in pages.items():
        diff = page[page.index(f'class="ks-edit-diff" data-item="{email.pk}"'):]
        # Word by word: only what the reviewer changed is struck out and inserted.
        assert ('We <del class="edit">are sorry</del><ins class="edit">apologise</ins> for the '
                '<del class="edit">confusion.</del><ins class="edit">mix-up.</ins>') in diff, name
    [edit] = next(c for c in json.loads(render_report(repaired, "json")[0])["compensation"] if c["id"] == email.pk)["edit"]
    assert (edit["field"], edit["before"], edit["after"]) == ("body", drafted, edited)
    assert '<ins class="edit">apologise</ins>' in render_html(build_report(repaired))  # the PDF's HTML


def test_the_ticket_page_lists_its_incidents_decisions_and_items_linked(client, repaired, reviewer):
    ticket = Ticket.objects.get(workspace=repaired.workspace, ticket_id="t05")
    reversal = repaired.compensation_items.get(ticket_id="t05", kind=K.REFUND_REVERSAL)
    review.reject_item(item=reversal, actor=reviewer, reason="the customer kept the goods", via="admin")
    client.force_login(reviewer)
    html = client.get(reverse("admin:provenance_ticket_change", args=[ticket.pk])).content.decode()
    record = html[html.index('id="ticket-record"'):]
    assert f'href="{reverse("admin:repairs_incident_change", args=[repaired.pk])}">Incident #{repaired.pk}</a>' in record
    assert reverse("admin:compensation_compensationitem_case", args=[repaired.pk, "t05"]) in record
    explain = reverse("admin:repairs_incident_explain", args=[repaired.pk])
    triage = repaired.outcomes.get(ticket="t05", agent="triage")
    assert f'href="{explain}?action={triage.action_id}"' in record
    assert '<mark class="removed">a full refund</mark>' in record and '<mark class="added">a reply, no refund</mark>' in record
    for item in repaired.compensation_items.filter(ticket_id="t05"):
        assert f'href="{reverse("admin:compensation_compensationitem_change", args=[item.pk])}">#{item.pk}</a>' in record
    assert "reviewer-admin: the customer kept the goods" in record
    untouched = Ticket.objects.get(workspace=repaired.workspace, ticket_id="t20")
    page = client.get(reverse("admin:provenance_ticket_change", args=[untouched.pk])).content.decode()
    assert 'id="ticket-untouched"' in page
