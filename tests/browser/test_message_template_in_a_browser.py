"""In Chromium at 1440 and 390 px: a Support lead rewrites the workspace's customer message, previews it
against the incident's real drafts (a customer's name shown as text) and saves it; the page fits."""
from __future__ import annotations

import uuid

import pytest

from compensation.models import MessageTemplate
from core.roles import SUPPORT_LEAD, ensure_roles
from tests.browser.test_what_leaves_in_a_browser import OVERFLOW, PASSWORD, VIEWPORTS, _person
from tests.helpers import repaired_incident

pytestmark = [pytest.mark.browser]


def test_a_lead_previews_the_new_wording_on_real_drafts_and_saves_it(new_page, django_user_model):
    ensure_roles()
    lead = _person(django_user_model, "lead", SUPPORT_LEAD)
    flagger = _person(django_user_model, "flagger", SUPPORT_LEAD)
    incident = repaired_incident(flagger=flagger, workspace=f"wording-{uuid.uuid4().hex[:6]}")
    t05 = incident.compensation_items.get(kind="correction_email", ticket_id="t05")
    page = new_page("lead", PASSWORD)
    for viewport in VIEWPORTS:
        page.set_viewport_size(viewport)
        page.goto(f"/admin/compensation/messagetemplate/workspace/{incident.workspace_id}/")
        page.fill("#id_body", "Dear <i>$customer</i>,\n\n$explanation\n\n$corrected_answer\n\nThe $team team")
        page.click("button[value=preview]")
        row = page.locator(f".preview-row[data-item='{t05.pk}']")
        assert row.is_visible()
        body = row.locator("pre.body").inner_text()
        assert body.startswith(f"Dear <i>{t05.facts['customer']}</i>,")  # shown as text, not markup
        assert "$75.00 back" in body and page.locator(".preview-row i").count() == 0
        assert page.evaluate(OVERFLOW) <= 1, viewport
    page.fill("#id_reason", "our own voice")
    page.click("button[value=save]")
    assert "Template saved (version 1)" in page.locator(".messagelist").inner_text()
    assert MessageTemplate.objects.get(workspace=incident.workspace).body.startswith("Dear <i>$customer</i>")
