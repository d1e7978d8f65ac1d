"""The reviewer's and the lead's pages fit a 390 px phone and a 1440 px desktop (the admin's sidebar open,
as a new browser has it) without the page itself scrolling sideways: wide tables scroll inside their own
box, item forms stack, long text wraps."""
from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Group

from compensation.models import CompensationItem
from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source, Workspace
from provenance.recording.services import desk_run
from tests.helpers import repaired_incident

pytestmark = [pytest.mark.browser]
PASSWORD = "pass-1234-kintsugi"
VIEWPORTS = ({"width": 390, "height": 844}, {"width": 1440, "height": 900})
# How far the page reaches past the window, in CSS pixels; 1 px of rounding is tolerated.
OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"


def _person(django_user_model, username: str, group: str):
    user = django_user_model.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


def _signed_in(chromium, live_server, username: str, contexts: list):
    context = chromium.new_context(viewport=VIEWPORTS[0], base_url=live_server.url)
    context.set_default_timeout(15_000)
    contexts.append(context)
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


def test_review_and_lead_pages_fit_a_phone_and_a_desktop_without_scrolling_sideways(
        chromium, live_server, django_user_model):
    ensure_roles()
    lead = _person(django_user_model, "lead", SUPPORT_LEAD)
    _person(django_user_model, "reviewer", REVIEWER)
    incident = repaired_incident(flagger=lead, workspace=f"fit-{uuid.uuid4().hex[:6]}")
    # A second desk whose poisoned page is not flagged yet: the flag page with its blast radius and what-if.
    unflagged = f"fit-flag-{uuid.uuid4().hex[:6]}"
    desk_run(workspace=unflagged)
    Workspace.objects.get(name=unflagged).members.add(*django_user_model.objects.filter(is_superuser=False))
    to_flag = Source.objects.get(workspace__name=unflagged, source_id=POISONED_PAGE)
    item = incident.compensation_items.filter(kind=CompensationItem.Kind.REFUND_REVERSAL).order_by("pk").first()

    contexts, overflowing, out_of_reach, console = [], {}, {}, []
    try:
        reviewer = _signed_in(chromium, live_server, "reviewer", contexts)
        lead_page = _signed_in(chromium, live_server, "lead", contexts)
        for page in (reviewer, lead_page):
            page.on("console", lambda message: console.append(message.text))
        cases_url = f"/admin/compensation/compensationitem/cases/?incident={incident.pk}"
        reviewer.goto(cases_url)
        case_urls = reviewer.locator("tr.case").evaluate_all("rows => rows.map(r => r.dataset.url)")
        assert len(case_urls) == 5

        def measure(page, name: str, viewport: dict):
            overflow = page.evaluate(OVERFLOW)
            if overflow > 1:
                overflowing[(name, viewport["width"])] = viewport["width"] + overflow

        for viewport in VIEWPORTS:
            for page in (reviewer, lead_page):
                page.set_viewport_size(viewport)
            # The reviewer's pages.
            reviewer.goto(cases_url)
            assert reviewer.locator("#nav-sidebar").is_visible() == (viewport["width"] > 767)
            measure(reviewer, "case list", viewport)
            for url in case_urls:
                reviewer.goto(url)
                measure(reviewer, f"case {url.split('/')[-2]}", viewport)
                # The item's decision is in the window, not in a box scrolled off to the side.
                approve = reviewer.locator("#case-items td.decide input[type=submit]").first.bounding_box()
                if approve["x"] + approve["width"] > viewport["width"]:
                    out_of_reach[(url.split("/")[-2], viewport["width"])] = round(approve["x"] + approve["width"])
            reviewer.goto(cases_url)
            reviewer.check("#select-all")
            reviewer.click("#cases-bulk button[value=approve]")
            reviewer.locator("#bulk-summary").wait_for()
            assert reviewer.locator("#bulk-cases").inner_text() == "5"  # the confirmation; nothing decided yet
            measure(reviewer, "bulk confirmation", viewport)
            reviewer.goto(f"/admin/compensation/compensationitem/?incident__id__exact={incident.pk}"
                          "&status__exact=pending")
            measure(reviewer, "review queue", viewport)
            reviewer.goto(f"/admin/compensation/compensationitem/{item.pk}/change/")
            reviewer.locator("#approve-form").wait_for()
            measure(reviewer, "item page", viewport)
            # The lead's pages.
            lead_page.goto("/admin/")
            lead_page.locator("#open-incidents").wait_for()
            measure(lead_page, "dashboard", viewport)
            lead_page.goto("/admin/repairs/incident/")
            measure(lead_page, "incident list", viewport)
            lead_page.goto(f"/admin/repairs/incident/{incident.pk}/change/")
            lead_page.locator("#outcome-table").wait_for()
            measure(lead_page, "incident page", viewport)
            lead_page.goto(f"/admin/provenance/source/{to_flag.pk}/flag/")
            lead_page.locator("#flag-confirm").wait_for()
            measure(lead_page, "flag page", viewport)
    finally:
        for context in contexts:
            context.close()
    assert not overflowing, f"pages wider than the window (page, window width): page width {overflowing}"
    assert not out_of_reach, f"an item's Approve button past the window's edge (case, window width): {out_of_reach}"
    # The bulk confirmation only showed what would happen.
    assert not incident.compensation_items.exclude(status=CompensationItem.Status.PENDING).filter(
        kind=CompensationItem.Kind.REFUND_REVERSAL).exists()
    assert not [m for m in console if "Content Security Policy" in m or "Content-Security-Policy" in m], console
