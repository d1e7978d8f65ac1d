"""In Chromium at 1440 and 390 px: the case page and the bulk confirmation show the email's text itself,
visible in the window; those pages, the case list with "give me the next N", the members page and the
refusal page neither scroll sideways nor lay one control over another."""
from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Group

from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.models import Source
from tests.helpers import repaired_incident

pytestmark = [pytest.mark.browser]
PASSWORD = "pass-1234-kintsugi"
VIEWPORTS = ({"width": 1440, "height": 900}, {"width": 390, "height": 844})
OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"
# Pairs of visible controls in the page's content whose boxes overlap (1 px of rounding tolerated).
OVERLAPS = """() => {
  const els = [...document.querySelectorAll('#content-main input:not([type=hidden]), #content-main button, '
    + '#content-main select, #content-main textarea, #content-main a.button')]
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  const out = [];
  for (let i = 0; i < els.length; i++) {
    const a = els[i].getBoundingClientRect();
    for (let j = i + 1; j < els.length; j++) {
      const b = els[j].getBoundingClientRect();
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) {
        out.push([els[i].outerHTML.slice(0, 90), els[j].outerHTML.slice(0, 90)]);
      }
    }
  }
  return out;
}"""


def _person(django_user_model, username: str, group: str):
    user = django_user_model.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


def _body_in_view(page, selector: str, viewport: dict) -> bool:
    body = page.locator(selector).first
    body.scroll_into_view_if_needed()
    box = body.bounding_box()
    return body.is_visible() and box["width"] > 100 and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1


def test_messages_are_read_in_full_and_the_pages_fit(new_page, django_user_model):
    ensure_roles()
    lead = _person(django_user_model, "lead", SUPPORT_LEAD)
    _person(django_user_model, "reviewer", REVIEWER)
    incident = repaired_incident(flagger=lead, workspace=f"leaves-{uuid.uuid4().hex[:6]}")
    email = incident.compensation_items.filter(kind="correction_email", ticket_id="t05").get()
    source = Source.objects.get(workspace=incident.workspace, source_id=incident.source_id)
    reviewer, lead_page = new_page("reviewer", PASSWORD), new_page("lead", PASSWORD)
    problems: dict = {}

    def check(page, name: str, viewport: dict):
        overflow = page.evaluate(OVERFLOW)
        overlaps = page.evaluate(OVERLAPS)
        if overflow > 1 or overlaps:
            problems[(name, viewport["width"])] = {"overflow": overflow, "overlaps": overlaps}

    for viewport in VIEWPORTS:
        reviewer.set_viewport_size(viewport)
        lead_page.set_viewport_size(viewport)
        cases = f"/admin/compensation/compensationitem/cases/?incident={incident.pk}"
        reviewer.goto(cases)
        assert reviewer.locator("#next-batch").is_visible()
        check(reviewer, "case list", viewport)
        reviewer.goto(f"/admin/compensation/compensationitem/cases/{incident.pk}/t05/")
        article = f"#case-messages article[data-item='{email.pk}']"
        assert _body_in_view(reviewer, f"{article} .message-body", viewport)
        assert email.body[:40] in reviewer.locator(f"{article} .message-body").inner_text()
        check(reviewer, "case page", viewport)
        reviewer.goto(cases)
        reviewer.check("#select-all")
        reviewer.click("#cases-bulk button[value=approve]")
        reviewer.locator("#bulk-messages").wait_for()
        assert _body_in_view(reviewer, "#bulk-messages .message-body", viewport)
        assert reviewer.locator("#bulk-messages .like-this").first.is_visible()
        check(reviewer, "bulk confirmation", viewport)
        reviewer.goto(f"/admin/provenance/source/{source.pk}/flag/")  # a reviewer may not flag: the refusal
        assert reviewer.locator("#needed-role").is_visible()
        check(reviewer, "refusal", viewport)
        lead_page.goto(f"/admin/provenance/workspace/{incident.workspace_id}/members/")
        lead_page.locator("#members-table").wait_for()
        check(lead_page, "members page", viewport)
    assert problems == {}
    assert not incident.compensation_items.filter(status="approved").exists()  # only confirmations were shown
