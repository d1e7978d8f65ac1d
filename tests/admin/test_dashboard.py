"""The landing dashboard: open incidents, the review queue's size and amount, recent flags, workspaces."""
from django.db.models import Sum
from django.urls import reverse

from compensation.models import CompensationItem
from provenance.desk.scenario import POISONED_PAGE

from kintsugi_site.dashboard import SUSPICIOUS_PER_WORKSPACE, SUSPICIOUS_WORKSPACES

# Session, user, two incident lists, their item counts, cases, money to recover and reviewers,
# workspaces, the queue totals, the failed deliveries' count, permissions; and for the sources worth a
# look, the newest workspaces, then per workspace its open incidents, its sources and each shown
# source's radius: a constant, whatever the number of incidents or sources.
DASHBOARD_QUERIES = 13 + 1 + SUSPICIOUS_WORKSPACES * (2 + SUSPICIOUS_PER_WORKSPACE)


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


def test_dashboard_says_what_each_open_incident_paid_wrongly_and_what_is_left_to_recover(lead_client, repaired):
    response = lead_client.get(reverse("admin:index"))
    html = response.content.decode()
    reversals = CompensationItem.objects.filter(incident=repaired, kind=CompensationItem.Kind.REFUND_REVERSAL)
    cents = reversals.aggregate(s=Sum("amount_cents"))["s"]
    assert cents and reversals.filter(status="pending").count() == reversals.count()
    incident = response.context["dashboard"]["open_incidents"][0]
    assert incident.recovery.shown == {"wrongly_paid": f"${cents / 100:,.2f}", "to_recover": f"${cents / 100:,.2f}",
                                       "recovered": "nothing", "not_asked": "nothing"}
    # Waiting for people reads amber, not the green of a finished repair.
    assert incident.waiting and 'class="ks-status waiting"' in html and 'class="ks-status repaired"' not in html
    assert f"0 of {incident.review.cases} " in html


def test_dashboard_lists_sources_worth_a_look_without_what_ifs(lead_client, repaired):
    response = lead_client.get(reverse("admin:index"))
    found = response.context["dashboard"]["suspicious"]
    # The flagged page has its incident open: it is being dealt with, so it is not suggested again.
    assert found and POISONED_PAGE not in {s["source"] for s in found}
    assert all(s["reasons"] and not any("what-if" in r for r in s["reasons"]) for s in found)
    assert 'id="sources-worth-a-look"' in response.content.decode()
