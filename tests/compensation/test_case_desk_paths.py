"""The case list's fast paths on the canonical incident (five cases, fourteen items): the page of cases that
need a decision, read from the pending items' index, is the page the grouping of every case gives, under
every filter it serves; one pass's figures are the figures of the cases themselves; a cursor that does not
belong to the view is refused or empty, never another view's cases; and the four work-queue pages keep a
fixed, small number of queries."""
from __future__ import annotations

import pytest

from compensation.review import assignments, case_queue, cases as case_selectors, selectors
from compensation.models import CompensationItem
from compensation.review.services import approve_item

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status
CASES = "/admin/compensation/compensationitem/cases/"
BULK = "/admin/compensation/compensationitem/cases/bulk/"
QUERY_BOUND = 15  # bench desk's target per page at 20,000 cases (bench/desk.py TARGET)


def _decide_t06_and_claim_t05(canonical):
    reviewer, incident = canonical.people.reviewer, canonical.incident
    for item in incident.compensation_items.filter(ticket_id="t06"):
        approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    assignments.assign(keys=[(incident.pk, "t05")], assignee=reviewer, actor=reviewer, reason="mine", via="admin")


def _filter_cases(canonical):
    name = canonical.incident.compensation_items.filter(ticket_id="t07").first().facts["customer"]
    return [{}, {"q": "t05"}, {"q": name.split()[0].lower()}, {"q": "$75.00"}, {"q": "nobody"},
            {"kind": K.CORRECTION_EMAIL}, {"outcome": St.PENDING}, {"assignee": "me"}, {"assignee": "none"}]


def test_the_indexed_page_of_undecided_cases_is_the_grouped_page_under_every_filter(canonical):
    reviewer, incident = canonical.people.reviewer, canonical.incident
    _decide_t06_and_claim_t05(canonical)
    for extra in _filter_cases(canonical):
        filters = case_queue.Filters(state="needs_decision", **extra)
        assert case_queue._keyed(incident, filters)
        grouped = [r["ticket_id"] for r in case_queue.grouped(user=reviewer, incident=incident, filters=filters,
                                                               actor=reviewer)]
        paged = [c.ticket for c in case_queue.page(user=reviewer, incident=incident, filters=filters,
                                                   actor=reviewer).cases]
        assert paged == grouped, extra
        assert "t06" not in paged
    # Keyset and numbered pages of the indexed path cover the same cases once, in the same order.
    filters, seen, after = case_queue.Filters(state="needs_decision"), [], ""
    while True:
        found = case_queue.page(user=reviewer, incident=incident, filters=filters, after=after, size=2)
        seen += [c.ticket for c in found.cases]
        if not found.has_next:
            break
        after = found.next_cursor
    numbered = [c.ticket for n in (1, 2) for c in case_queue.page(
        user=reviewer, incident=incident, filters=filters, number=n, size=2).cases]
    assert seen == numbered == ["t04", "t05", "t07", "t08"]


def test_a_cursor_of_another_view_gives_no_cases_and_a_broken_one_is_refused(canonical):
    reviewer, incident = canonical.people.reviewer, canonical.incident
    filters = case_queue.Filters(state="needs_decision")
    for cursor in (f"0.{incident.pk + 1}.t04", f"2.{incident.pk}.t04"):  # another incident; decided cases
        assert case_queue.page(user=reviewer, incident=incident, filters=filters, after=cursor).cases == []
    for cursor in ("not-a-cursor", "0.x.t04", f"0.{incident.pk}."):
        with pytest.raises(case_queue.BadFilter):
            case_queue.page(user=reviewer, incident=incident, filters=filters, after=cursor)


def test_one_pass_figures_are_the_cases_own_figures(canonical):
    reviewer, incident = canonical.people.reviewer, canonical.incident
    _decide_t06_and_claim_t05(canonical)
    currencies = sorted(selectors.item_counts(incident=incident).currencies)
    everything = case_selectors.cases(user=reviewer, incident=incident)
    for extra in _filter_cases(canonical) + [{"min_cents": 8000, "max_cents": 9000}]:
        for state in ("needs_decision", "decided", ""):
            filters = case_queue.Filters(state=state, **extra)
            totals, progress = case_queue.figures(user=reviewer, incident=incident, filters=filters, actor=reviewer,
                                                  currencies=currencies)
            shown = {c.ticket for c in case_queue.page(user=reviewer, incident=incident, filters=filters,
                                                       actor=reviewer).cases}
            expected = case_selectors.totals([c for c in everything if c.ticket in shown])
            expected["money"] = [m for m in expected["money"] if m["cents"]]  # the page prints no "$0.00"
            assert totals == expected, (state, extra)
            assert progress == case_queue.progress(incident=incident)
    assert (progress["cases"], progress["cases_decided"]) == (5, 1)


def test_the_work_queue_pages_keep_a_small_fixed_number_of_queries(canonical, client, django_assert_max_num_queries):
    incident = canonical.incident
    client.force_login(canonical.people.reviewer)
    pages = [f"{CASES}?incident={incident.pk}", f"{CASES}?incident={incident.pk}&q=t05",
             f"{CASES}?incident={incident.pk}&page=2", f"{CASES}?incident={incident.pk}&delivery=failed&state=all",
             f"{CASES}{incident.pk}/t05/?incident={incident.pk}"]
    for url in pages:
        with django_assert_max_num_queries(QUERY_BOUND):
            assert client.get(url).status_code == 200, url
    with django_assert_max_num_queries(QUERY_BOUND):
        confirm = client.post(BULK, {"case": [f"{incident.pk}/t{n:02d}" for n in range(4, 9)], "decision": "approve"})
    assert confirm.status_code == 200 and 'id="bulk-cases">5<' in confirm.content.decode()
