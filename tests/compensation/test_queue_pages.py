"""The review queue's change list stays a handful of cheap queries on a large queue: counts from the
maintained totals for the status / incident filters, a capped row count ("10,000+") for the others."""
import re

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from compensation.admin import CappedCount, QueuePaginator
from compensation.models import CompensationItem

pytestmark = pytest.mark.django_db
CHANGELIST = "admin:compensation_compensationitem_changelist"


@pytest.fixture
def reviewer_client(client, canonical):
    client.force_login(canonical.people.reviewer)
    return client


def _get(client, params, status=200):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == status
    return response, [q["sql"] for q in queries.captured_queries]


@pytest.mark.parametrize("filters", ["none", "pending", "incident", "incident_pending"])
def test_queue_count_comes_from_the_totals_for_status_and_incident_filters(reviewer_client, canonical, filters):
    incident = canonical.incident
    params = {"none": {}, "pending": {"status__exact": "pending"}, "incident": {"incident__id__exact": incident.pk},
              "incident_pending": {"incident__id__exact": incident.pk, "status__exact": "pending"}}[filters]
    expected = CompensationItem.objects.filter(**{"incident_id" if k.startswith("incident") else "status": v
                                                  for k, v in params.items()}).count()
    response, sql = _get(reviewer_client, {**params, "o": "1"})  # a column ordering changes nothing
    cl = response.context["cl"]
    assert cl.result_count == expected and type(cl.result_count) is int and len(cl.result_list) == expected
    assert not any("COUNT(" in q and "compensation_compensationitem" in q for q in sql), "counted the item table"
    assert any("compensation_queuetotal" in q for q in sql)
    assert len(sql) < 11  # 10, and the capability read on every request
    assert f"{expected} compensation items" in response.content.decode()


@pytest.mark.parametrize("params", [{"kind__exact": "refund_reversal"}, {"q": "t05"},
                                    {"status__exact": "pending", "valid__exact": "1"}])
def test_other_filters_count_rows_exactly_under_the_cap(reviewer_client, canonical, params):
    response, sql = _get(reviewer_client, params)
    cl = response.context["cl"]
    assert type(cl.result_count) is int and cl.result_count == len(cl.result_list) > 0
    capped = [q for q in sql if "LIMIT 10001" in q and q.startswith("SELECT COUNT(*) FROM (SELECT")]
    assert len(capped) == 1 and "ORDER BY" not in capped[0]
    assert len(sql) < 11  # 10, and the capability read on every request


def test_an_incident_filter_that_is_not_a_number_is_refused_without_reading_the_totals(reviewer_client, canonical):
    response, sql = _get(reviewer_client, {"incident__id__exact": "x"}, status=302)
    assert response["Location"].endswith("?e=1")
    assert not any("compensation_queuetotal" in q for q in sql)


def test_a_count_past_the_cap_reads_n_plus_and_every_page_stays_reachable(reviewer_client, canonical, monkeypatch):
    monkeypatch.setattr(QueuePaginator, "CAP", 5)
    monkeypatch.setattr(admin.site._registry[CompensationItem], "list_per_page", 2)
    valid = CompensationItem.objects.filter(valid=True).count()
    assert valid > 8
    response, sql = _get(reviewer_client, {"valid__exact": "1"})
    cl, html = response.context["cl"], response.content.decode()
    assert isinstance(cl.result_count, CappedCount) and str(cl.result_count) == "5+"
    assert "5+ compensation items" in html
    assert "LIMIT 6" in next(q for q in sql if q.startswith("SELECT COUNT(*) FROM (SELECT"))
    last = (valid + 1) // 2  # a page past the capped count's 3 pages still lists its rows
    response, _ = _get(reviewer_client, {"valid__exact": "1", "p": last})
    assert len(response.context["cl"].result_list) == valid - 2 * (last - 1)
    response, _ = _get(reviewer_client, {"valid__exact": "1", "p": last + 5})  # past the end: empty, not an error
    assert list(response.context["cl"].result_list) == []


def test_capped_page_links_end_in_an_ellipsis_instead_of_a_last_page(canonical):
    paginator = QueuePaginator(CompensationItem.objects.order_by("pk"), 1)
    paginator.CAP = 3
    assert str(paginator.count) == "3+" and paginator.num_pages == 4
    assert list(paginator.get_elided_page_range(1)) == [1, 2, 3, 4, "…"]
    assert list(paginator.get_elided_page_range(9)) == [1, 2, "…", 6, 7, 8, 9, 10, 11, 12, "…"]
    exact = QueuePaginator(CompensationItem.objects.order_by("pk"), 1, known_count=3)
    assert exact.count == 3 and list(exact.get_elided_page_range(1)) == [1, 2, 3]


@pytest.mark.parametrize("params", [{}, {"status__exact": "pending"}, {"status__exact": "approved"},
                                    {"status__exact": "executed"}, {"incident__id__exact": "{incident}"},
                                    {"incident__id__exact": "{incident}", "status__exact": "rejected"}])
def test_every_status_and_incident_view_pages_through_an_index_in_queue_order(reviewer_client, canonical, params):
    """With sorting priced out, a plan without a Sort node or a Filter means one index both selects the
    page's rows and serves its ORDER BY: on 100k items, a 50-row index scan. (Through the queue_order index
    with a filter, an executed-items page took 130-265 ms: it walked every pending and approved row first.)"""
    from compensation.review.selectors import review_queue

    incident = canonical.incident
    params = {k: v.format(incident=incident.pk) for k, v in params.items()}
    CompensationItem.objects.filter(pk__in=list(incident.compensation_items.order_by("pk")
                                                .values_list("pk", flat=True)[:4])).update(status=params.get(
                                                    "status__exact", "approved"))
    response, _ = _get(reviewer_client, params)
    cl = response.context["cl"]
    same = review_queue().filter(**{"status" if k.startswith("status") else "incident_id": v for k, v in params.items()})
    assert [i.pk for i in cl.result_list] == [i.pk for i in same] and cl.result_list  # the queue's own order
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_sort = off")
        cur.execute("SET LOCAL enable_incremental_sort = off")
        plan = cl.queryset[:50].explain()
    # Ordered by an index that also selects the rows ("Join Filter"s of the joins aside).
    assert "Sort" not in plan and not _filtered_nodes(plan) - {"provenance_workspace_members"}, plan


def _filtered_nodes(plan: str) -> set[str]:
    """The tables of the plan's nodes that filter rows after their index. The tenancy rule's membership
    lookup (one row per workspace) may be planned through its workspace index with a filter on the user,
    depending on the table's statistics when it was last analysed; that is no walk over items."""
    tables, node = set(), ""
    for line in plan.splitlines():
        if re.match(r"^\s*(->|\w)", line) and not re.match(r"^\s*\w[\w ]*:", line):
            node = line
        elif re.match(r"^\s*Filter:", line):
            found = re.search(r" on (\w+)", node)
            tables.add(found.group(1) if found else node.strip())
    return tables
