"""One set of counts: the incident page, its review-queue link, the dashboard and the reports all read an
incident's items from compensation.review.selectors.item_counts; closing has its own confirmation page; the
status badge follows the repair's phase."""
import io
import json
import re
import zipfile

from django.urls import reverse

from compensation.drafting import kinds
from compensation.review import services as review
from compensation.models import CompensationItem
from compensation.review.selectors import item_counts
from repairs.models import Incident
from kintsugi_site.reports import render_report

K = CompensationItem.Kind


def _approve_one(incident, reviewer) -> None:
    item = incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    review.approve_item(item=item, actor=reviewer, reason="matches the payments export", via="admin")


def test_incident_page_queue_link_dashboard_and_reports_give_the_same_counts(client, repaired, support_lead,
                                                                           reviewer):
    _approve_one(repaired, reviewer)  # so pending and total differ
    items = CompensationItem.objects.filter(incident=repaired)
    drafts, held = items.filter(kind__in=kinds.COMPENSATING).count(), items.exclude(
        kind__in=kinds.COMPENSATING).count()
    pending = items.filter(status="pending").count()
    assert (drafts, held, pending) == (10, 0, 9)  # one message per customer: no reply held apart
    client.force_login(support_lead)

    page = client.get(reverse("admin:repairs_incident_change", args=[repaired.pk]))
    html = page.content.decode()
    assert "10 compensation drafts + 0 held replacements = 10 items" in html
    link = re.search(r'id="review-pending-link" href="([^"]+)"><span class="count">(\d+)</span> pending', html)
    assert int(link.group(2)) == pending and "all 10 items of this incident" in html

    queue = client.get(link.group(1).replace("&amp;", "&"))
    assert queue.context["cl"].result_count == pending

    board = client.get(reverse("admin:index")).content.decode()
    row = re.search(rf'<tr data-incident="{repaired.pk}">.*?data-items="(\d+)" data-pending="(\d+)"', board, re.S)
    assert (int(row.group(1)), int(row.group(2))) == (10, pending)

    report = json.loads(render_report(repaired, "json")[0])["item_counts"]
    assert {k: report[k] for k in ("compensation_drafts", "held_replacements", "total", "pending")} == {
        "compensation_drafts": 10, "held_replacements": 0, "total": 10, "pending": pending}
    assert report["by_status"]["approved"] == 1 and report["by_kind"]["refund_reversal"]["approved"] == 1
    assert report["sentence"] == "10 compensation drafts + 0 held replacements = 10 items"
    with zipfile.ZipFile(io.BytesIO(render_report(repaired, "csv")[0])) as z:
        rows = z.read(f"incident-{repaired.pk}/items.csv").decode().splitlines()
    assert "total,all,10" in rows and "refund_reversal,pending,4" in rows
    assert item_counts(incident=repaired).pending == pending

    client.force_login(reviewer)
    cases = client.get(reverse("admin:compensation_compensationitem_cases") + f"?incident={repaired.pk}&status=all")
    html = cases.content.decode()
    assert f"Review items: 10 compensation drafts + 0 held replacements = 10 items, {pending} pending." in html
    assert cases.context["totals"]["items"] == 10 and cases.context["totals"]["pending_items"] == pending
    assert cases.context["item_counts"] == item_counts(incident=repaired)


def test_close_page_shows_what_closing_does_and_changes_nothing(client, repaired, support_lead):
    client.force_login(support_lead)
    response = client.get(reverse("admin:repairs_incident_close", args=[repaired.pk]))
    html = response.content.decode()
    assert response.status_code == 200 and 'id="close-form"' in html and 'name="reason"' in html
    assert re.search(r'id="close-cancelled">cancels its <strong>10</strong> pending items\s*'
                     r'\(10 compensation drafts \+ 0 held replacements\), which would have moved \$400\.00', html)
    assert Incident.objects.get(pk=repaired.pk).status == "repaired"
    assert not CompensationItem.objects.filter(incident=repaired, status="cancelled").exists()
    page = client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    assert f'id="close-link" href="{reverse("admin:repairs_incident_close", args=[repaired.pk])}"' in page


def test_confirming_the_close_cancels_pending_items_through_the_service(client, repaired, support_lead):
    client.force_login(support_lead)
    url = reverse("admin:repairs_incident_close", args=[repaired.pk])
    assert client.post(url, {"reason": "  "}).status_code == 302
    assert Incident.objects.get(pk=repaired.pk).status == "repaired"  # no reason, nothing done
    response = client.post(url, {"reason": "the partner retracted the page"})
    assert response.status_code == 302
    incident = Incident.objects.get(pk=repaired.pk)
    assert incident.status == "closed"
    assert incident.transitions.last().reason == "the partner retracted the page"
    assert set(incident.compensation_items.values_list("status", flat=True)) == {"cancelled"}
    again = client.get(url).content.decode()
    # Closed, its source still quarantined: the page offers only to lift the quarantine (a false alarm).
    assert 'id="quarantine-held"' in again and 'id="lift-confirm"' in again and 'id="close-confirm"' not in again


def test_close_page_is_for_leads_only(client, repaired, reviewer):
    client.force_login(reviewer)
    assert client.get(reverse("admin:repairs_incident_close", args=[repaired.pk])).status_code == 403


def test_status_badge_follows_the_repairs_phase(client, repaired, support_lead):
    client.force_login(support_lead)
    Incident.objects.filter(pk=repaired.pk).update(status="repairing", phase="verifying", progress_done=1,
                                                   progress_total=2)
    page = client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    assert re.search(r'id="incident-status" data-phase="verifying">Verifying<', page)
    board = client.get(reverse("admin:index")).content.decode()
    assert re.search(rf'<tr data-incident="{repaired.pk}">.*?<span class="ks-status repairing">Verifying</span>',
                     board, re.S)
    progress = client.get(reverse("admin:repairs_incident_progress", args=[repaired.pk])).json()
    assert progress["label"] == "Verifying"
    Incident.objects.filter(pk=repaired.pk).update(phase="walking")
    page = client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    assert 'data-phase="walking">Repairing<' in page and ">Open<" not in page
