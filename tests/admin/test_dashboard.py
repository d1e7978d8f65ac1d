"""The landing dashboard: open incidents, the review queue's size and amount, recent flags, workspaces."""
from django.db.models import Sum
from django.urls import reverse

from compensation.models import CompensationItem
from provenance.desk.scenario import POISONED_PAGE

# Session, user, two incident lists, their item counts, workspaces, the queue totals, the failed
# deliveries' count, permissions: a constant, whatever the number of incidents.
DASHBOARD_QUERIES = 10


def test_dashboard_shows_open_incidents_review_queue_and_workspaces(lead_client, repaired,
                                                                    django_assert_max_num_queries):
    with django_assert_max_num_queries(DASHBOARD_QUERIES):
        response = lead_client.get(reverse("admin:index"))
    html = response.content.decode()
    board = response.context["dashboard"]
    assert [i.pk for i in board["open_incidents"]] == [repaired.pk]
    assert [i.source_id for i in board["recent_flags"]] == [POISONED_PAGE]
    assert [(w.name, w.action_count) for w in board["workspaces"]] == [(repaired.workspace.name, 70)]
    pending = CompensationItem.objects.filter(status="pending")
    assert board["review_queue"]["pending"] == pending.count() >= 10
    cents = pending.aggregate(s=Sum("amount_cents"))["s"]
    assert board["review_queue"]["amounts"] == [{"currency": "USD", "cents": cents, "text": f"${cents / 100:,.2f}"}]
    assert f'id="pending-count">{pending.count()}<' in html and f"<div>${cents / 100:,.2f}</div>" in html
    assert f'href="{reverse("admin:repairs_incident_change", args=[repaired.pk])}"' in html
    assert 'id="open-incidents"' in html and 'id="recent-flags"' in html and 'id="workspaces"' in html


def test_dashboard_queries_do_not_grow_with_the_number_of_incidents(lead_client, repaired, support_lead,
                                                                    django_assert_max_num_queries):
    from repairs.models import Incident

    Incident.objects.bulk_create(Incident(workspace=repaired.workspace, run_number=1, source_id=f"src-{i}",
                                          reason="load", flagged_by=support_lead, flagged_via="cli")
                                 for i in range(40))
    with django_assert_max_num_queries(DASHBOARD_QUERIES):
        response = lead_client.get(reverse("admin:index"))
    assert len(response.context["dashboard"]["open_incidents"]) == 10
