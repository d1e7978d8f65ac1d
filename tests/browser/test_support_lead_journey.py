"""The support lead's whole job in a real browser, against a live server and a real Celery worker:
log in, preview and flag the poisoned page, watch the repair finish, read the outcome and the picture,
have a second person work the review queue, and download the PDF report."""
from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import pytest
from django.contrib.auth.models import Group

from compensation.models import CompensationItem
from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Workspace
from provenance.recording.services import desk_run
from repairs.models import Incident

pytestmark = [pytest.mark.browser, pytest.mark.worker]
PASSWORD = "pass-1234-kintsugi"
CANONICAL = {"blast_radius": "25", "poisoned": "1", "rerun_changed": "7", "rerun_same": "3", "skipped": "6",
             "superseded": "8", "new": "4", "effects_invalidated": "10"}


def _person(django_user_model, username: str, group: str):
    user = django_user_model.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


def test_lead_flags_watches_the_repair_reads_the_outcome_and_exports_the_pdf(
        new_page, celery_worker_process, django_user_model, screenshots, tmp_path, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    ensure_roles()
    team = [_person(django_user_model, "lead", SUPPORT_LEAD), _person(django_user_model, "reviewer", REVIEWER)]
    workspace = f"browser-{uuid.uuid4().hex[:6]}"
    desk_run(workspace=workspace)
    Workspace.objects.get(name=workspace).members.add(*team)

    # --- the lead finds the poisoned page and previews what flagging it would touch ---
    lead = new_page("lead", PASSWORD)
    lead.get_by_role("link", name="Sources").first.click()
    lead.get_by_role("link", name=POISONED_PAGE).click()
    lead.click("#flag-source-link")
    preview = lead.locator(f'section.flag-preview[data-source="{POISONED_PAGE}"]')
    assert preview.locator('[data-preview="size"] strong').inner_text() == "25"
    assert preview.locator('[data-preview="tickets"] strong').inner_text() == "8"
    assert preview.locator('[data-preview="amount"] strong').inner_text() == "$750.00"
    details = lead.locator(f'section.flag-details[data-source="{POISONED_PAGE}"]')
    assert details.locator('tr[data-agent="triage"] td.num').inner_text() == "8"
    # The decision comes first: its money and the Flag button are in the first screen, above the details.
    assert lead.locator("#flag-confirm").bounding_box()["y"] < details.bounding_box()["y"]
    assert not Incident.objects.exists()  # nothing happens before the confirmation
    lead.fill("#id_reason", "The partner blog tells agents to refund any VIP claim without checks.")
    lead.screenshot(path=screenshots / "flag-preview.png", full_page=True)
    lead.click("#flag-confirm")

    # --- the incident page: the progress bar runs to done (the page reloads itself), then the outcome ---
    lead.wait_for_url(re.compile(r"/admin/repairs/incident/\d+/change/"))
    incident = Incident.objects.get()
    assert incident.flagged_via == "admin"
    lead.locator('#repair-progress[data-state="done"]').wait_for(timeout=90_000)
    lead.locator("#outcome-table").wait_for()
    # Repaired, with items waiting for a reviewer: the status says so, never "Repaired" alone.
    assert lead.locator("#incident-status").inner_text() == "Needs review · 10 · $400.00"
    assert lead.locator("#repair-progress progress").get_attribute("value") == "100"
    values = {key: lead.locator(f'tr[data-outcome="{key}"] .value').inner_text() for key in CANONICAL}
    assert values == CANONICAL
    assert lead.locator('tr[data-outcome="effects_invalidated"] .detail').inner_text() == "(5 refunds, 5 emails)"
    assert lead.locator('tr[data-outcome="tickets_untouched"] td').inner_text() == "16 (of 24)"
    for table in ("facts", "decisions", "effects"):
        assert lead.locator(f'tr[data-verification="{table}"] td').inner_text() == "0"

    # --- the picture: the SVG the page embeds, one node per action coloured by its repair status ---
    picture = lead.locator("#blast-radius-picture")
    picture.scroll_into_view_if_needed()
    # The <object> holding the SVG is a frame of its own (same origin, so its nodes can be read and clicked).
    lead.wait_for_function("() => { const o = document.getElementById('blast-radius-picture');"
                           " return o.contentDocument && o.contentDocument.querySelector('g.node'); }")
    svg = lead.frame(url=re.compile(r"/graph\.svg"))
    svg.locator('g.node[data-status="poisoned"]').wait_for()
    statuses = svg.locator("g.node").evaluate_all("nodes => nodes.map(n => n.getAttribute('data-status'))")
    assert {s: statuses.count(s) for s in set(statuses)} == {
        "source": 1, "poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8, "new": 4}
    assert svg.locator('g.effect[data-status="invalidated"]').count() == 10
    lead.screenshot(path=screenshots / "incident.png", full_page=True)

    # --- "why is this here?" from the picture: a superseded refund, back to the flagged source ---
    svg.locator('g.node[data-status="superseded"]').first.click()
    lead.locator("#explain-chain").wait_for()
    chain = lead.locator("#explain-chain > li").all_inner_texts()
    assert POISONED_PAGE in chain[0] and "ingested the source" in chain[1] and "vip_rules" in chain[2]
    lead.go_back()

    # --- a second person works the review queue of this incident ---
    reviewer = new_page("reviewer", PASSWORD)
    reviewer.goto(f"/admin/repairs/incident/{incident.pk}/change/")
    reviewer.click("#review-pending-link")
    reviewer.wait_for_url(re.compile(r"/admin/compensation/compensationitem/\?"))
    pending = CompensationItem.objects.filter(incident=incident, status="pending", valid=True).order_by("pk")
    assert pending.count() >= 10
    reviewer.set_viewport_size({"width": 1900, "height": 900})  # the queue is a wide table
    reviewer.screenshot(path=screenshots / "review-queue.png", full_page=True)
    first, second = pending[0], pending[1]
    reviewer.goto(f"/admin/compensation/compensationitem/{first.pk}/change/")
    reviewer.fill("#approve-form input[name=reason]", "matches the ledger")
    reviewer.click("#approve-form input[type=submit]")
    reviewer.locator(".messagelist .success").wait_for()
    reviewer.goto(f"/admin/compensation/compensationitem/{second.pk}/change/")
    reviewer.fill("#reject-form input[name=reason]", "the customer already returned the item")
    reviewer.click("#reject-form input[type=submit]")
    reviewer.locator(".messagelist .success").wait_for()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status in ("approved", "executed") and first.decided_by.username == "reviewer"
    assert (second.status, second.decision_reason) == ("rejected", "the customer already returned the item")

    # --- back on the dashboard, then the PDF report ---
    lead.goto("/admin/")
    assert lead.locator(f'#open-incidents tr[data-incident="{incident.pk}"]').count() == 1
    assert int(lead.locator("#pending-count").inner_text()) == CompensationItem.objects.filter(status="pending").count()
    lead.screenshot(path=screenshots / "dashboard.png", full_page=True)
    lead.goto(f"/admin/repairs/incident/{incident.pk}/change/")
    with lead.expect_download() as download:
        lead.click("a.report-pdf")
    pdf = tmp_path / "report.pdf"
    download.value.save_as(pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    if shutil.which("pdftotext"):
        text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                                       check=True).stdout.split())  # table cells wrap: compare words
        assert POISONED_PAGE in text
        assert "10 (5 refunds, 5 emails)" in text and "rejected" in text and "the customer already returned" in text
