"""One message per customer per incident: a customer with three tickets in the incident (t05, t06 and t07
of the canonical desk, given one customer before the repair) gets ONE message that lists each ticket's
correction, written for the customer; drafting again, in parts or after a crash, adds nothing; a rejected
money item makes the message say only what happens (rewritten, and an approval given before reopened);
and the case page, the bulk confirmation, the API and MCP show the one message."""
from __future__ import annotations

import re
import uuid
import zlib
from types import SimpleNamespace

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from compensation.delivery import approval, sequencing
from compensation.delivery.execution import execute_item
from compensation.drafting import grouping
from compensation.drafting.drafts import (DRAFT_PARTS, _effect_dict, draft_compensations, draft_key, planned_items,
                                         ticket_parts)
from compensation.drafting.netting import plan_items
from compensation.drafting import effect_kinds
from compensation.models import AuditEvent, CompensationItem
from compensation.review import cases as case_selectors
from compensation.review.services import approve_item, reject_item
from kintsugi_site import mcp_server
from provenance.models import Ticket
from provenance.recording.services import desk_run, get_workspace
from repairs.models import Incident
from tests.helpers import api_key, flag_and_repair, make_people, module_transaction, shared_graphs

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status
GROUPED = ("t05", "t06", "t07")  # Elif Yilmaz's three requests: each refunded in full under the poisoned page
BACK = {"t05": "$75.00", "t06": "$90.00", "t07": "$100.00"}


@pytest.fixture(scope="module")
def one_customer_desk(django_db_setup, django_db_blocker):
    """The canonical desk with t05-t07 given one customer (the address written three ways), repaired once."""
    with module_transaction(django_db_blocker):
        people = make_people()
        name = f"grp-{uuid.uuid4().hex[:8]}"
        desk_run(workspace=name)
        ws = get_workspace(name)
        ws.members.add(people.lead, people.reviewer, people.auditor, people.lead_reviewer)
        for ticket, address in zip(GROUPED, ("elif.yilmaz@customers.example", " Elif.Yilmaz@Customers.example",
                                             "ELIF.YILMAZ@customers.example")):
            Ticket.objects.filter(workspace=ws, ticket_id=ticket).update(customer_name="Elif Yilmaz",
                                                                        customer_email=address.strip())
        incident = flag_and_repair(name, actor=people.lead_reviewer, reason="poisoned partner page")
        with shared_graphs(name):
            yield SimpleNamespace(people=people, incident_id=incident.pk)


@pytest.fixture
def desk(one_customer_desk):
    incident = Incident.objects.get(pk=one_customer_desk.incident_id)
    return SimpleNamespace(people=one_customer_desk.people, incident=incident,
                           message=incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t05"))


def test_a_customer_with_three_tickets_gets_one_message_naming_each_correction(desk):
    incident, message = desk.incident, desk.message
    assert incident.status == "repaired"
    mails = incident.compensation_items.filter(kind__in=(K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL))
    assert sorted(m.ticket_id for m in mails) == ["t04", "t05", "t08"]  # one each for t04, Elif, t08
    assert incident.compensation_items.filter(kind=K.REFUND_REVERSAL).count() == 5  # money stays per ticket
    assert incident.compensations == incident.compensation_items.count() == 8
    assert message.facts["tickets"] == list(GROUPED) and message.valid and message.status == St.PENDING
    assert message.to == message.customer_email == "elif.yilmaz@customers.example"
    body = message.body
    assert body.startswith("Hello Elif Yilmaz,") and "3 of your requests" in body
    entries = re.split(r"\n\n(?=\d\. About your request)", body)[1:]
    assert [e[:2] for e in entries] == ["1.", "2.", "3."]
    for entry, ticket in zip(entries, GROUPED):
        assert f"{BACK[ticket]} back" in entry.split("Here is our")[0]  # each entry's own correction
        assert "corrected answer" in entry and "does not qualify for a refund" in entry  # and its own reply
    assert not re.search(r"\bt0\d\b", message.subject + body)  # no ticket ids, written for the customer
    assert message.drafted_by.startswith("kintsugi (one message for 3 tickets")
    # Every effect of the three tickets' messages is carried, so the draft key is unique to them.
    assert {e["ticket"] for e in message.original} == set(GROUPED)


def test_the_per_ticket_plan_alone_would_send_the_customer_three_messages(desk):
    """Red case kept: the netting groups by ticket only, so without the grouping by customer Elif gets three."""
    incident = desk.incident
    effects = [_effect_dict(e) for e in incident.effects.all()]
    per_ticket = plan_items(effects, effect_kinds.kinds_of(incident.workspace_id))
    assert sorted(p.ticket for p in per_ticket if p.kind == K.CORRECTION_EMAIL and p.ticket in GROUPED) == list(GROUPED)
    _, planned, _ = planned_items(incident=incident, effects=effects, lock=False)
    assert [p.ticket for p in planned if p.kind == K.CORRECTION_EMAIL and p.ticket in GROUPED] == ["t05"]
    keys = grouping.customer_keys(incident.workspace_id, GROUPED)
    assert len(set(keys.values())) == 1  # the address normalised: one customer


def test_drafting_again_whole_or_in_parts_after_a_crash_adds_nothing(desk):
    incident = desk.incident
    keys = set(incident.compensation_items.values_list("draft_key", flat=True))
    assert draft_compensations(incident=incident) == 8 and incident.compensation_items.count() == 8
    # Parts are split by customer: the customer's three tickets are drafted by one worker, into the same
    # one message a single call makes (split by ticket, as before, they fell into three parts: red case).
    parts = ticket_parts(incident, DRAFT_PARTS)
    assert len({parts[t] for t in GROUPED}) == 1
    assert len({zlib.crc32(t.encode()) % DRAFT_PARTS for t in GROUPED}) == 3
    by_part = set()
    for part in range(DRAFT_PARTS):
        effects = [_effect_dict(e) for e in incident.effects.filter(ticket__in=[t for t, p in parts.items() if p == part])]
        by_part |= {draft_key(incident, p) for p in planned_items(incident=incident, effects=effects, lock=False)[1]}
    assert by_part == keys
    # A worker that died after some parts committed: the parts drafted again add nothing.
    for part in range(DRAFT_PARTS):
        draft_compensations(incident=incident, part=part, parts=DRAFT_PARTS)
    assert set(incident.compensation_items.values_list("draft_key", flat=True)) == keys


def test_a_customer_grouped_otherwise_since_gets_no_second_message(desk):
    """A ticket whose address changed after drafting regroups the plan (new draft keys: red case), yet
    drafting again adds nothing: every effect is already held by an item of the incident."""
    incident = desk.incident
    Ticket.objects.filter(workspace=incident.workspace, ticket_id="t07").update(customer_email="someone@else.example")
    effects = [_effect_dict(e) for e in incident.effects.all()]
    _, planned, _ = planned_items(incident=incident, effects=effects, lock=False)
    keys = set(incident.compensation_items.values_list("draft_key", flat=True))
    new = [p for p in planned if draft_key(incident, p) not in keys]
    assert sorted(p.ticket for p in new) == ["t05", "t07"]  # {t05, t06} and t07 alone: keys never drafted
    assert draft_compensations(incident=incident) == 8 and incident.compensation_items.count() == 8


def test_a_rejected_reversal_rewrites_the_message_to_say_only_what_happens(desk):
    incident, message, reviewer = desk.incident, desk.message, desk.people.reviewer
    t06 = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t06")
    before = approval.content_hash(message)
    reject_item(item=t06, actor=reviewer, reason="we let the customer keep it", via="admin")
    message.refresh_from_db()
    assert message.status == St.PENDING and message.valid and approval.content_hash(message) != before
    entries = re.split(r"\n\n(?=\d\. About your request)", message.body)[1:]
    assert "$90.00 back" not in message.body and "stays as it is" in entries[1].split("Here is our")[0]
    assert "$75.00 back" in entries[0] and "$100.00 back" in entries[2]  # the others still say what happens
    assert sequencing.refused_money(message) is None
    assert AuditEvent.objects.filter(action="item.redrafted", subject_id=str(message.pk)).exists()
    # Approved now, it waits for the two reversals it still announces, and leaves once they are approved.
    approve_item(item=message, actor=reviewer, reason="read it", via="admin")
    message.refresh_from_db()
    assert sequencing.waits_for(message).ticket_id == "t05"
    for ticket in ("t05", "t07"):
        approve_item(item=incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id=ticket), actor=reviewer,
                     reason="ok", via="admin")
    assert sequencing.waits_for(message) is None


def test_an_approved_message_is_reopened_when_a_money_item_it_announces_is_rejected(desk):
    incident, message, reviewer = desk.incident, desk.message, desk.people.reviewer
    approve_item(item=message, actor=reviewer, reason="read it", via="admin")
    reject_item(item=incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t07"), actor=reviewer,
                reason="keeps it", via="admin")
    message.refresh_from_db()
    assert message.status == St.PENDING and not message.approved_hash and "$100.00 back" not in message.body
    assert AuditEvent.objects.filter(action="item.reopened", subject_id=str(message.pk)).exists()


def test_execution_never_sends_the_older_words_when_a_decision_raced_the_rewrite(desk):
    """Red case for the last check: a money item rejected without the rewrite (a race) stops the send."""
    incident, message, reviewer = desk.incident, desk.message, desk.people.reviewer
    for ticket in GROUPED:
        approve_item(item=incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id=ticket), actor=reviewer,
                     reason="ok", via="admin")
    approve_item(item=message, actor=reviewer, reason="read it", via="admin")
    CompensationItem.objects.filter(kind=K.REFUND_REVERSAL, ticket_id="t06", incident=incident).update(status=St.REJECTED)
    done = execute_item(item_id=message.pk)
    assert done.status == St.PENDING and "$90.00 back" not in done.body and "stays as it is" in done.body


def test_undoing_the_rejection_rewrites_the_message_back(desk, settings):
    settings.KINTSUGI_UNDO_SECONDS = 600
    incident, message, reviewer = desk.incident, desk.message, desk.people.reviewer
    drafted = message.body
    t06 = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t06")
    reject_item(item=t06, actor=reviewer, reason="keeps it", via="admin")
    approval.undo(item=t06, actor=reviewer, reason="wrong click", via="admin")
    message.refresh_from_db()
    assert message.body == drafted and message.status == St.PENDING


def test_the_case_pages_the_bulk_confirmation_api_and_mcp_show_the_one_message(desk, client):
    incident, message, reviewer = desk.incident, desk.message, desk.people.reviewer
    client.force_login(reviewer)
    lead_page = client.get(reverse("admin:compensation_compensationitem_case", args=[incident.pk, "t05"])).content.decode()
    section = lead_page[lead_page.index('id="case-messages"'):]
    assert "3 of your requests" in section and all(f"{BACK[t]} back" in section for t in GROUPED)
    other = client.get(reverse("admin:compensation_compensationitem_case", args=[incident.pk, "t06"])).content.decode()
    assert 'id="message-elsewhere"' in other and f"#{message.pk}" in other and "t05, t06, t07" in other
    assert case_selectors.case(user=reviewer, incident_id=incident.pk, ticket="t07").message_elsewhere == [message]
    bulk = client.post(reverse("admin:compensation_compensationitem_cases_bulk"),
                       {"case": [f"{incident.pk}/{t}" for t in GROUPED], "decision": "approve"}).content.decode()
    assert "3 of your requests" in bulk[bulk.index('id="bulk-messages"'):]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_key(reviewer)}")
    shown = api.get(f"/api/v1/review-items/{message.pk}/").json()
    assert shown["message"]["body"] == message.body and shown["content_hash"] == approval.content_hash(message)
    listed = mcp_server.review_items(user=reviewer, workspace=incident.workspace.name, incident=incident.pk,
                                     status="pending", limit=50, offset=0)
    entry = next(i for i in listed["items"] if i["id"] == message.pk)
    assert entry["message"]["body"] == message.body and "$90.00 back" in entry["message"]["body"]
