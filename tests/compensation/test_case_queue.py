"""The case list as a work queue on the canonical incident (five cases, fourteen items, $400.00): search
by ticket, customer and amount; filters; keyset and numbered pages that cover every case once; bulk
decisions behind a confirmation page through the item services (four-eyes, tenancy and audit hold);
claiming; and the progress every way of deciding moves."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from compensation.review import assignments, case_queue
from compensation.models import AuditEvent, CaseAssignment, CompensationItem
from compensation.review.services import approve_item

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status
CASES = "/admin/compensation/compensationitem/cases/"
BULK = "/admin/compensation/compensationitem/cases/bulk/"


def _tickets(found) -> list[str]:
    return [c.ticket for c in found.cases]


def _page(canonical, **filters):
    return case_queue.page(user=canonical.people.reviewer, incident=canonical.incident,
                           filters=case_queue.Filters(**filters), actor=canonical.people.reviewer)


def _customer(incident, ticket) -> str:
    return incident.compensation_items.filter(ticket_id=ticket).first().facts["customer"]


def test_search_finds_a_case_by_ticket_customer_and_amount(canonical):
    incident = canonical.incident
    assert _tickets(_page(canonical)) == ["t04", "t05", "t06", "t07", "t08"]
    assert _tickets(_page(canonical, q="t05")) == ["t05"]
    name = _customer(incident, "t07")
    assert name and _tickets(_page(canonical, q=name.split()[0].upper())) == ["t07"]
    assert _tickets(_page(canonical, q="$75.00")) == ["t05"]  # its reversal moves $75.00
    assert _tickets(_page(canonical, q="nobody-by-that-name")) == []


def test_filters_by_kind_state_and_amount(canonical):
    reviewer = canonical.people.reviewer
    assert _tickets(_page(canonical, kind=K.REPLACEMENT_EMAIL)) == []  # every reply rides in its case's message
    canonical.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, ticket_id__in=("t05", "t07")).update(
        kind=K.REPLACEMENT_EMAIL)
    assert _tickets(_page(canonical, kind=K.REPLACEMENT_EMAIL)) == ["t05", "t07"]
    assert _tickets(_page(canonical, min_cents=8000, max_cents=9000)) == ["t06", "t08"]
    for item in canonical.incident.compensation_items.filter(ticket_id="t06"):
        approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    assert _tickets(_page(canonical, state="needs_decision")) == ["t04", "t05", "t07", "t08"]
    assert _tickets(_page(canonical, state="decided")) == ["t06"]
    assert _tickets(_page(canonical, outcome="approved")) == ["t06"]
    with pytest.raises(case_queue.BadFilter):
        case_queue.Filters.from_query({"kind": "bribe"})
    with pytest.raises(case_queue.BadFilter):
        case_queue.Filters.from_query({"min": "ten dollars"})


def test_keyset_and_numbered_pages_cover_every_case_once(canonical):
    reviewer, incident = canonical.people.reviewer, canonical.incident
    seen, after = [], ""
    while True:
        found = case_queue.page(user=reviewer, incident=incident, filters=case_queue.Filters(), after=after, size=2)
        seen += _tickets(found)
        if not found.has_next:
            break
        after = found.next_cursor
    numbered = [t for n in (1, 2, 3) for t in _tickets(case_queue.page(
        user=reviewer, incident=incident, filters=case_queue.Filters(), number=n, size=2))]
    assert seen == numbered == ["t04", "t05", "t06", "t07", "t08"]
    with pytest.raises(case_queue.BadFilter):
        case_queue.page(user=reviewer, incident=incident, filters=case_queue.Filters(), after="not-a-cursor")


def test_the_case_list_url_searches_and_pages(canonical, client):
    """The contract: /cases/?incident=ID&q=TEXT filters by ticket or customer; &page=N pages it."""
    incident = canonical.incident
    client.force_login(canonical.people.reviewer)
    base = f"{CASES}?incident={incident.pk}"
    everything = client.get(base)
    name = _customer(incident, "t04")
    searched = client.get(base + "&q=" + name)
    assert everything.status_code == searched.status_code == 200
    assert name in searched.content.decode() and len(searched.content) < len(everything.content)
    assert 'data-case="%d/t05"' % incident.pk not in searched.content.decode()
    assert client.get(base + "&page=2").status_code == 200
    assert client.get(base + "&after=junk").status_code == 200  # a bad cursor is refused with a message
    assert "1 case matches" in client.get(base + "&q=t08").content.decode()


def test_bulk_approve_shows_what_leaves_then_decides_through_the_services(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    picked = [f"{incident.pk}/t04", f"{incident.pk}/t06"]
    page = client.post(BULK, {"case": picked, "decision": "approve"})
    text = page.content.decode()
    assert page.status_code == 200 and 'id="bulk-cases">2<' in text
    items = incident.compensation_items.filter(ticket_id__in=["t04", "t06"])
    money = sum(i.amount_cents for i in items if i.moves_money)
    assert f'id="bulk-items">{items.count()}<' in text and f"${money / 100:,.2f}" in text
    assert not incident.compensation_items.exclude(status=St.PENDING).exists()  # nothing decided yet
    client.post(BULK, {"case": picked, "decision": "approve", "confirm": "yes", "reason": "checked by phone"})
    assert set(items.values_list("status", flat=True)) <= {St.APPROVED, St.EXECUTED}
    approved = AuditEvent.objects.filter(action="item.approved", incident_id=incident.pk, actor=reviewer)
    assert approved.count() == items.count() and {e.reason for e in approved} == {"checked by phone"}
    progress = case_queue.progress(incident=incident)
    assert progress["cases_decided"] == 2 and progress["items_decided"] == items.count()


def test_bulk_reject_needs_a_reason_and_all_matching_follows_the_filters(canonical, client):
    incident = canonical.incident
    client.force_login(canonical.people.reviewer)
    filters = f"incident={incident.pk}&q=t07"
    client.post(BULK, {"all_matching": "1", "filters": filters, "decision": "reject", "confirm": "yes", "reason": ""})
    assert not incident.compensation_items.exclude(status=St.PENDING).exists()
    client.post(BULK, {"all_matching": "1", "filters": filters, "decision": "reject", "confirm": "yes",
                       "reason": "goods returned"})
    assert set(incident.compensation_items.filter(ticket_id="t07").values_list("status", flat=True)) == {St.REJECTED}
    assert incident.compensation_items.filter(status=St.PENDING).exclude(ticket_id="t07").count() == 10 - \
        incident.compensation_items.filter(ticket_id="t07").count()


def test_bulk_keeps_four_eyes_and_tenancy(canonical, client, make_user):
    incident, flagger = canonical.incident, canonical.people.lead_reviewer
    client.force_login(flagger)  # flagged the incident: may not decide its items, in bulk or not
    client.post(BULK, {"case": [f"{incident.pk}/t04"], "decision": "approve", "confirm": "yes", "reason": "mine"})
    assert not incident.compensation_items.exclude(status=St.PENDING).exists()
    assert AuditEvent.objects.filter(action="item.refused", actor=flagger, incident_id=incident.pk).exists()
    stranger = make_user("stranger1", "Reviewer")  # a Reviewer of no workspace of this incident
    client.force_login(stranger)
    assert client.post(BULK, {"case": [f"{incident.pk}/t04"], "decision": "approve"}).status_code == 404
    assert client.get(f"{CASES}?incident={incident.pk}").status_code == 404


def test_claiming_cases_and_each_reviewers_count(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    client.post(BULK, {"case": [f"{incident.pk}/t05", f"{incident.pk}/t08"], "decision": "claim"})
    assert set(CaseAssignment.objects.filter(assignee=reviewer).values_list("ticket_id", flat=True)) == {"t05", "t08"}
    assert AuditEvent.objects.filter(action="case.assigned", actor=reviewer).count() == 2
    assert _tickets(_page(canonical, assignee="me")) == ["t05", "t08"]
    assert _tickets(_page(canonical, assignee="none")) == ["t04", "t06", "t07"]
    assert assignments.workload(incident=incident) == [{"reviewer": reviewer.username, "cases": 2},
                                                      {"reviewer": "", "cases": 3}]
    page = client.get(f"{CASES}?incident={incident.pk}&assignee=me").content.decode()
    assert f'data-case="{incident.pk}/t05"' in page and f'data-case="{incident.pk}/t04"' not in page
    client.post(BULK, {"case": [f"{incident.pk}/t04"], "decision": "assign", "assignee": canonical.people.lead_reviewer.username})
    assert CaseAssignment.objects.get(ticket_id="t04").assignee == canonical.people.lead_reviewer
    client.post(BULK, {"case": [f"{incident.pk}/t06"], "decision": "assign", "assignee": canonical.people.auditor.username})
    assert not CaseAssignment.objects.filter(ticket_id="t06").exists()
    with pytest.raises(PermissionError):  # an auditor cannot be handed cases
        assignments.assign(keys=[(incident.pk, "t04")], assignee=canonical.people.auditor, actor=reviewer,
                           reason="help", via="admin")


def test_a_claim_leaves_cases_another_reviewer_claimed_first_with_them(canonical, client):
    """Two reviewers tick the same unassigned cases on lists loaded at the same moment: the second claim
    takes only what is still free, and says who holds the rest (it used to take them over silently)."""
    incident, first, second = canonical.incident, canonical.people.reviewer, canonical.people.lead_reviewer
    client.force_login(first)
    client.post(BULK, {"case": [f"{incident.pk}/t05", f"{incident.pk}/t08"], "decision": "claim"})
    client.force_login(second)
    answer = client.post(BULK, {"case": [f"{incident.pk}/t05", f"{incident.pk}/t06"], "decision": "claim"}, follow=True)
    said = [str(m) for m in answer.context["messages"]]
    assert "1 case claimed." in said
    assert f"1 case was already claimed by another reviewer and stays theirs ({first.username} 1)." in said
    held = dict(CaseAssignment.objects.filter(incident=incident).values_list("ticket_id", "assignee__username"))
    assert held == {"t05": first.username, "t08": first.username, "t06": second.username}
    assert not AuditEvent.objects.filter(action="case.assigned", incident_id=incident.pk).exclude(from_status="").exists()
    # Handing a case over stays possible, deliberately: "assign" moves it.
    client.post(BULK, {"case": [f"{incident.pk}/t05"], "decision": "assign", "assignee": second.username})
    assert CaseAssignment.objects.get(incident=incident, ticket_id="t05").assignee == second


def test_the_next_case_after_a_decision_passes_over_cases_another_reviewer_claimed(canonical, client):
    """Two reviewers split an incident and each press `a`: the case that opens next is one of the
    reviewer's own or an unassigned one, never one the other reviewer claimed."""
    incident, reviewer, other = canonical.incident, canonical.people.reviewer, canonical.people.lead_reviewer
    assignments.claim(keys=[(incident.pk, "t05")], actor=reviewer, reason="mine", via="admin")
    assignments.claim(keys=[(incident.pk, "t06"), (incident.pk, "t08")], actor=other, reason="mine", via="admin")
    client.force_login(reviewer)
    case = f"{CASES}{incident.pk}/t05/?incident={incident.pk}"
    page = client.get(case).content.decode()
    assert f'data-next="{CASES}{incident.pk}/t07/?incident={incident.pk}"' in page
    assert "5 left in the incident" in page  # still every case of the incident
    decided = client.post(f"/admin/compensation/compensationitem/case-decisions/{incident.pk}/t05/?incident={incident.pk}",
                          {"decision": "approve_all"})
    assert decided["Location"] == f"{CASES}{incident.pk}/t07/?incident={incident.pk}"
    for ticket in ("t04", "t07"):
        for item in incident.compensation_items.filter(ticket_id=ticket):
            approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    answer = client.post(f"/admin/compensation/compensationitem/case-decisions/{incident.pk}/t05/?incident={incident.pk}",
                         {"decision": "approve_all"}, follow=True)
    assert "No cases left for you: 2 that other reviewers claimed still need a decision." in [
        str(m) for m in answer.context["messages"]]


def test_progress_moves_with_a_decision_made_in_the_item_queue(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    before = case_queue.progress(incident=incident)
    assert (before["cases"], before["cases_decided"], before["items"], before["items_decided"]) == (5, 0, 10, 0)
    for item in incident.compensation_items.filter(ticket_id="t04").order_by("kind"):
        approve_item(item=item, actor=reviewer, reason="ok", via="admin")  # not through the case pages
    after = case_queue.progress(incident=incident)
    assert after["cases_decided"] == 1 and after["items_decided"] == 2


def test_the_incident_api_says_what_waits_for_review(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    api = APIClient()
    api.force_authenticate(user=reviewer)
    review = api.get(f"/api/v1/incidents/{incident.pk}/").json()["review"]
    assert review == {"items_pending": 10, "amount_pending_cents": 40000, "cases_pending": 5,
                      "status_text": "Needs review · 10 · $400.00"}
    for item in incident.compensation_items.filter(ticket_id="t04"):
        approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    review = api.get(f"/api/v1/incidents/{incident.pk}/").json()["review"]
    assert review["cases_pending"] == 4 and review["items_pending"] == 8
