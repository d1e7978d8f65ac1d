"""The incident page, its progress endpoint, the picture and 'why is this here?'."""
import re
import xml.dom.minidom

from django.urls import reverse

from provenance.desk.scenario import POISONED_PAGE
from repairs.models import ActionOutcome, Incident
from repairs.services import flag_source

CANONICAL = {"blast_radius": "25", "poisoned": "1", "rerun_changed": "7", "rerun_same": "3", "skipped": "6",
             "superseded": "8", "new": "4", "effects_invalidated": "10", "tickets_untouched": "16"}


def outcome_values(html: str) -> dict:
    return dict(re.findall(r'data-outcome="(\w+)".*?<span class="value">(\d+)</span>', html, re.S))


def test_incident_page_shows_the_articles_outcome_in_eleven_queries_at_most(lead_client, repaired,
                                                                            django_assert_max_num_queries):
    url = reverse("admin:repairs_incident_change", args=[repaired.pk])
    # The tenth: the customers' names of the page of tickets, for their before → after in words. The
    # eleventh: the quarantine of the flagged source (held or lifted, and the ingests it refused). The
    # twelfth and thirteenth: what the flag contained, and the effects it held.
    with django_assert_max_num_queries(14):
        response = lead_client.get(url)
    html = response.content.decode()
    values = outcome_values(html)
    assert {k: values[k] for k in CANONICAL} == CANONICAL
    assert "(5 refunds, 5 emails)" in html and "(of 24)" in html
    assert 'data-verification="facts"><th scope="row">Active facts</th><td class="num">0<' in html
    assert "matches a clean re-run" in html
    assert 'data-state="done"' in html and 'value="100"' in html
    assert POISONED_PAGE in html


def test_per_ticket_before_and_after(lead_client, repaired):
    response = lead_client.get(reverse("admin:repairs_incident_change", args=[repaired.pk]))
    rows = {r.ticket: r for r in response.context["ticket_rows"]}
    assert sorted(t for t in rows if t) == [f"t0{i}" for i in range(1, 9)]
    t05 = rows["t05"]
    assert [s["agent"] for s in t05.before] == ["triage", "refund", "notifier"]
    assert [s["agent"] for s in t05.after] == ["triage", "notifier"]
    assert t05.before[0]["decision"] == "choice: refund, level: full"
    assert t05.after[0]["decision"] == "choice: reply, level: none"
    assert not rows["t01"].changed and rows["t04"].changed
    assert len(response.context["invalidated_effects"]) == 10


def test_review_queue_links_are_filtered_to_the_incident(lead_client, repaired):
    html = lead_client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    changelist = reverse("admin:compensation_compensationitem_changelist")
    assert f'href="{changelist}?incident__id__exact={repaired.pk}&amp;status__exact=pending"' in html
    queue = lead_client.get(f"{changelist}?incident__id__exact={repaired.pk}&status__exact=pending")
    assert queue.status_code == 200
    assert queue.context["cl"].result_count >= 10


def test_progress_endpoint_reports_status_and_percent(lead_client, canonical_desk, support_lead,
                                                      django_assert_max_num_queries):
    incident = flag_source(workspace=canonical_desk, source_id=POISONED_PAGE, actor=support_lead, reason="r",
                           via=Incident.Via.ADMIN)
    Incident.objects.filter(pk=incident.pk).update(status="repairing", phase="walking", progress_done=5,
                                                   progress_total=10)
    url = reverse("admin:repairs_incident_progress", args=[incident.pk])
    with django_assert_max_num_queries(6):
        data = lead_client.get(url).json()
    assert data == {"incident": incident.pk, "status": "repairing", "label": "Repairing", "phase": "walking", "done": 5, "total": 10,
                    "percent": 30, "running": True, "error": None}
    page = lead_client.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode()
    assert 'data-state="running"' in page and "appears once the repair" in page


def test_picture_colours_every_action_by_its_repair_status(lead_client, repaired, django_assert_max_num_queries):
    url = reverse("admin:repairs_incident_graph", args=[repaired.pk])
    with django_assert_max_num_queries(10):
        response = lead_client.get(url)
    assert response["Content-Type"].startswith("image/svg+xml")
    svg = xml.dom.minidom.parseString(response.content)  # well-formed XML
    groups = [g for g in svg.getElementsByTagName("g") if g.getAttribute("data-status")]
    statuses = [g.getAttribute("data-status") for g in groups if "node" in g.getAttribute("class")]
    counts = {s: statuses.count(s) for s in set(statuses)}
    assert counts == {"source": 1, "poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                      "superseded": 8, "new": 4}
    effects = [g.getAttribute("data-status") for g in groups if "effect" in g.getAttribute("class")]
    # 10 invalidated (5 refunds, 5 emails), 6 live on the genuine VIP tickets, 6 held replacements
    assert {s: effects.count(s) for s in set(effects)} == {"invalidated": 10, "live": 6, "held": 6}
    edges = [p.getAttribute("class") for p in svg.getElementsByTagName("path")]
    assert edges.count("edge feeds") == 8 and edges.count("edge ingested") == 1


def test_picture_of_a_big_radius_is_grouped_and_paged(lead_client, workspace_name, support_lead, settings):
    from provenance.recording.services import desk_run, get_workspace
    from repairs.job import run_repair

    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace=workspace_name, tickets=120, seed=3)
    get_workspace(workspace_name).members.add(support_lead)
    incident = flag_source(workspace=get_workspace(workspace_name), source_id=POISONED_PAGE, actor=support_lead,
                           reason="big", via=Incident.Via.CLI)
    incident = run_repair(incident_id=incident.pk)
    assert incident.blast_radius > 80
    page = lead_client.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode()
    assert 'id="blast-radius-overview"' in page and "next tickets" in page
    graph = reverse("admin:repairs_incident_graph", args=[incident.pk])
    overview = xml.dom.minidom.parseString(lead_client.get(f"{graph}?overview=1").content)
    nodes = [g for g in overview.getElementsByTagName("g") if "group" in g.getAttribute("class")]
    assert sum(int(re.search(r"× ([\d,]+)", g.getElementsByTagName("text")[0].firstChild.data)[1].replace(",", ""))
               for g in nodes) == incident.blast_radius + incident.counts["new"]
    seen = set()
    for n in (1, 2):
        svg = lead_client.get(f"{graph}?page={n}&per_page=12").content.decode()
        lanes = set(re.findall(r'<g class="lane">.*?font-weight="bold">([^<]+)</text>', svg)) - {"memory"}
        assert len(lanes) == 12 and not lanes & seen
        seen |= lanes


def test_explain_a_superseded_refund(lead_client, repaired, django_assert_max_num_queries):
    refund = ActionOutcome.objects.get(incident=repaired, agent="refund", ticket="t05")
    url = reverse("admin:repairs_incident_explain", args=[repaired.pk]) + f"?action={refund.action_id}"
    with django_assert_max_num_queries(10):
        response = lead_client.get(url)
    steps = response.context["path"]["steps"]
    assert [(s["agent"], s["ticket"], s["status"], s["reached_by"]["edge"]) for s in steps] == [
        ("research", None, "poisoned", "INGESTED"),
        ("triage", "t05", "rerun_changed", "FEEDS"),
        ("refund", "t05", "superseded", "HANDED_OFF"),
    ]
    assert steps[0]["reached_by"]["source"] == POISONED_PAGE
    read = steps[1]["facts_read"]
    assert [(f["key"], f["active"]) for f in read] == [("vip_rules", False)]
    assert "no checks" in read[0]["value"]
    html = response.content.decode()
    assert "vip_rules" in html and "no checks" in html and "handed off by" in html


def test_explain_an_effect_and_a_new_action(lead_client, repaired):
    invalidated_email = repaired.effects.get(role="invalidated", kind="email", ticket="t05")
    url = reverse("admin:repairs_incident_explain", args=[repaired.pk])
    path = lead_client.get(f"{url}?effect={invalidated_email.effect_id}").context["path"]
    assert [s["agent"] for s in path["steps"]] == ["research", "triage", "refund", "notifier"]
    assert path["effect"]["state"] == "invalidated" and path["effect"]["kind"] == "email"
    new_notifier = ActionOutcome.objects.get(incident=repaired, status="new", ticket="t05")
    path = lead_client.get(f"{url}?action={new_notifier.action_id}").context["path"]
    assert [(s["agent"], s["status"]) for s in path["steps"]] == [
        ("research", "poisoned"), ("triage", "rerun_changed"), ("notifier", "new")]
    assert lead_client.get(f"{url}?action=999999").status_code == 404


def test_incident_changelist_and_transitions_stay_cheap(lead_client, client, make_user, repaired,
                                                       django_assert_max_num_queries):
    with django_assert_max_num_queries(10):
        assert lead_client.get(reverse("admin:repairs_incident_changelist")).status_code == 200
    client.force_login(make_user("auditor-admin", "Auditor", member_of=repaired.workspace))
    with django_assert_max_num_queries(10):
        assert client.get(reverse("admin:repairs_incidenttransition_changelist")).status_code == 200


def test_close_needs_a_reason_and_goes_through_the_service(lead_client, repaired):
    url = reverse("admin:repairs_incident_close", args=[repaired.pk])
    lead_client.post(url, {"reason": ""})
    repaired.refresh_from_db()
    assert repaired.status == "repaired"
    lead_client.post(url, {"reason": "all items reviewed"})
    repaired.refresh_from_db()
    assert repaired.status == "closed"
    assert repaired.transitions.last().reason == "all items reviewed"
    assert repaired.transitions.last().via == "admin"


def test_reviewer_reads_the_incident_but_cannot_close_it(client, reviewer, repaired):
    client.force_login(reviewer)
    page = client.get(reverse("admin:repairs_incident_change", args=[repaired.pk]))
    assert page.status_code == 200 and "Close the incident" not in page.content.decode()
    assert client.post(reverse("admin:repairs_incident_close", args=[repaired.pk]), {"reason": "x"}).status_code == 403


def test_incident_page_shows_how_long_each_phase_took(lead_client, repaired):
    html = lead_client.get(reverse("admin:repairs_incident_change", args=[repaired.pk])).content.decode()
    shown = dict(re.findall(r'<span class="ks-phase" data-phase="(\w+)" data-seconds="([\d.]*)">', html))
    assert list(shown) == ["walking", "applying", "verifying"], shown
    assert all(float(seconds) > 0 for seconds in shown.values()), shown
