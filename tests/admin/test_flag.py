"""Flagging from the Source admin: a preview first, then the same service as the CLI and the API."""
import pytest
from django.urls import reverse

from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source
from repairs.models import Incident, IncidentTransition


@pytest.fixture
def poisoned_page(canonical_desk) -> Source:
    return Source.objects.get(workspace=canonical_desk, source_id=POISONED_PAGE)


def test_flag_preview_shows_the_blast_radius_before_anything_happens(lead_client, poisoned_page,
                                                                      django_assert_max_num_queries):
    # 9 for the preview, the rest for the what-if beside it (its reads and its audit event) and the session's
    # save that keeps an idle session alive (SESSION_SAVE_EVERY_REQUEST), and the workspace's message template
    # the what-if drafts with, and the workspace's declared effect kinds read once before the what-if's
    # replays (their callbacks must open no connection of their own), and the tickets' addresses the drafting
    # groups one message per customer by; none per action.
    with django_assert_max_num_queries(27):
        response = lead_client.get(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]))
    assert response.status_code == 200
    preview = response.context["previews"][0]["radius"]
    assert preview["size"] == 25 and preview["tickets"] == 8
    assert preview["amount_at_stake"] == 750
    assert preview["by_agent"] == {"research": 1, "triage": 8, "refund": 8, "notifier": 8}
    assert preview["effects"] == 16 and preview["effects_by_kind"] == {"email": 8, "refund": 8}
    html = response.content.decode()
    assert 'data-agent="triage"' in html and "<strong>$750.00</strong>" in html and 'name="reason"' in html
    assert not Incident.objects.exists()


def test_confirming_the_flag_opens_an_incident_through_the_service(lead_client, poisoned_page, support_lead):
    url = reverse("admin:provenance_source_flag", args=[poisoned_page.pk])
    response = lead_client.post(url, {"reason": "the partner page tells agents to refund without checks"})
    incident = Incident.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:repairs_incident_change", args=[incident.pk])
    assert (incident.source_id, incident.flagged_by, incident.flagged_via) == (POISONED_PAGE, support_lead, "admin")
    transition = IncidentTransition.objects.get(incident=incident)
    assert (transition.actor, transition.via, transition.reason) == (
        support_lead, "admin", "the partner page tells agents to refund without checks")


def test_flag_without_a_reason_is_refused_and_keeps_the_preview(lead_client, poisoned_page):
    response = lead_client.post(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]), {"reason": "  "})
    assert response.status_code == 200
    assert "Give a reason" in response.content.decode()
    assert not Incident.objects.exists()


def test_flagging_a_source_with_an_open_incident_shows_that_incident(lead_client, poisoned_page, support_lead):
    lead_client.post(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]), {"reason": "first"})
    incident = Incident.objects.get()
    for response in (lead_client.get(reverse("admin:provenance_source_flag", args=[poisoned_page.pk])),
                     lead_client.post(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]),
                                      {"reason": "again"})):
        assert response.status_code == 302
        assert response["Location"] == reverse("admin:repairs_incident_change", args=[incident.pk])
    assert Incident.objects.count() == 1


def test_list_action_goes_to_the_same_preview(lead_client, poisoned_page):
    response = lead_client.post(reverse("admin:provenance_source_changelist"),
                                {"action": "flag_sources", "_selected_action": [poisoned_page.pk]})
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('admin:provenance_source_flag_many')}?ids={poisoned_page.pk}"
    preview = lead_client.get(response["Location"])
    assert preview.context["previews"][0]["radius"]["size"] == 25


def test_list_action_flags_several_sources_and_skips_one_already_open(lead_client, canonical_desk, poisoned_page):
    other = Source.objects.get(workspace=canonical_desk, source_id="acme/vip-program")
    lead_client.post(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]), {"reason": "first"})
    url = f"{reverse('admin:provenance_source_flag_many')}?ids={poisoned_page.pk},{other.pk}"
    preview = lead_client.get(url)
    already = {p["source"].source_id: p["incident"] is not None for p in preview.context["previews"]}
    assert already == {POISONED_PAGE: True, "acme/vip-program": False}
    assert len(preview.context["flaggable"]) == 1
    response = lead_client.post(url, {"reason": "both"})
    assert response.status_code == 302
    assert sorted(Incident.objects.values_list("source_id", flat=True)) == ["acme/vip-program", POISONED_PAGE]


def test_source_change_page_offers_the_flag_only_to_leads(client, make_user, poisoned_page, lead_client):
    page = reverse("admin:provenance_source_change", args=[poisoned_page.pk])
    assert 'id="flag-source-link"' in lead_client.get(page).content.decode()
    reviewer = make_user("rev-no-flag", "Reviewer", member_of=poisoned_page.workspace)
    client.force_login(reviewer)
    assert 'id="flag-source-link"' not in client.get(page).content.decode()
    assert client.get(reverse("admin:provenance_source_flag", args=[poisoned_page.pk])).status_code == 403
    assert client.post(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]),
                       {"reason": "x"}).status_code == 403
    assert not Incident.objects.exists()


def test_the_flag_page_puts_the_decision_first_and_pages_long_lists(lead_client, poisoned_page, monkeypatch):
    from repairs import decide_admin

    monkeypatch.setattr(decide_admin, "LIST_PAGE", 2)  # the canonical desk changes 5 tickets' decisions: three pages
    url = reverse("admin:provenance_source_flag", args=[poisoned_page.pk])
    response = lead_client.get(url)
    first, changed = response.content.decode(), response.context["previews"][0]["what_if"]["tickets"]["total"]
    assert changed == 5
    # The money, the reason box and the Flag button come before the details (walk, tickets, actions).
    assert first.index("<strong>$750.00</strong>") < first.index('name="reason"') < first.index('id="flag-confirm"') \
        < first.index('data-what-if="walk"') < first.index('class="radius-actions"')
    tickets = lambda html: html.split('data-what-if="tickets">')[1].split("</ul>")[0].count("<li>")  # noqa: E731
    assert tickets(first) == 2 and "5 tickets would change decision (1 to 2 shown)" in first
    assert 'id="tickets-next"' in first and "tickets_page=2" in first and "items_page=2" in first
    last = lead_client.get(url + "?tickets_page=3").content.decode()
    assert tickets(last) == 1 and "(5 to 5 shown)" in last and 'id="tickets-next"' not in last
    assert tickets(lead_client.get(url + "?tickets_page=99").content.decode()) == 1  # past the end: the last page


def test_paged_lists_cover_every_row_once():
    from repairs.decide_admin import LIST_PAGE, paged

    rows = list(range(LIST_PAGE * 2 + 1))
    pages = [paged(rows, n) for n in (1, 2, 3)]
    assert sum((p["rows"] for p in pages), []) == rows
    assert [p["next"] for p in pages] == [2, 3, None] and paged([], 1)["rows"] == []
