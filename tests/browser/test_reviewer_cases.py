"""A reviewer works every case of the canonical incident in a real browser with the keyboard only:
j opens a case, a approves it, r focuses the reason to reject one; each decision opens the next
undecided case, until none is left. Saves docs' cases.png and case.png when KINTSUGI_SCREENSHOTS is set."""
from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import Group

from compensation.drafting import kinds
from compensation.models import CompensationItem
from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.models import OutboxEmail
from tests.helpers import repaired_incident

pytestmark = [pytest.mark.browser]
PASSWORD = "pass-1234-kintsugi"
St = CompensationItem.Status


@pytest.fixture
def executed_in_process():
    """Approved items execute in the request that approved them (no worker for this test)."""
    from kintsugi_site.celery import app

    old = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


def _person(django_user_model, username: str, group: str):
    user = django_user_model.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


def test_a_reviewer_works_every_case_with_the_keyboard(new_page, django_user_model, screenshots, settings,
                                                        executed_in_process):
    settings.EMAIL_BACKEND = "provenance.mail.OutboxBackend"
    ensure_roles()
    lead = _person(django_user_model, "lead", SUPPORT_LEAD)
    _person(django_user_model, "reviewer", REVIEWER)
    incident = repaired_incident(flagger=lead, workspace=f"cases-{uuid.uuid4().hex[:6]}")

    page = new_page("reviewer", PASSWORD)
    console = []  # the browser reports a Content-Security-Policy violation on the console
    page.on("console", lambda message: console.append(message.text))
    assert "/compensationitem/cases/" in page.url  # a Reviewer's door after signing in is the cases
    page.goto(f"/admin/compensation/compensationitem/cases/?incident={incident.pk}")
    assert page.locator("#cases-left").inner_text() == "5 cases left"
    assert page.locator("#cases-money").inner_text() == "$400.00"
    # At 1400 px the table, its amounts and its links fit: no horizontal scrolling.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=screenshots / "cases.png", full_page=True)

    page.keyboard.press("j")
    page.wait_for_url(re.compile(r"/cases/\d+/t04/"))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("#approve-case").is_visible() and page.locator("#reject-case").is_visible()
    page.screenshot(path=screenshots / "case.png", full_page=True)

    for ticket in ("t04", "t05", "t06", "t07"):
        page.wait_for_url(re.compile(rf"/cases/\d+/{ticket}/"))
        page.keyboard.press("a")
    page.wait_for_url(re.compile(r"/cases/\d+/t08/"))
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.id") == "reject-reason"
    page.keyboard.type("customer already returned the refund")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/compensationitem/cases/"))
    assert page.locator("#cases-left").inner_text() == "No cases left"

    statuses = dict(incident.compensation_items.values_list("ticket_id", "status").filter(kind="refund_reversal"))
    assert statuses == {"t04": St.EXECUTED, "t05": St.EXECUTED, "t06": St.EXECUTED, "t07": St.EXECUTED,
                        "t08": St.REJECTED}
    assert not incident.compensation_items.filter(status=St.PENDING).exists()
    assert not [m for m in console if "Content Security Policy" in m or "Content-Security-Policy" in m], console
    # Every approved email left once, one per customer of the four approved cases; the rejected case sent nothing.
    sent = OutboxEmail.objects.filter(idempotency_key__startswith="compensation:")
    assert sent.count() == incident.compensation_items.filter(status=St.EXECUTED, kind__in=kinds.MESSAGES).count() == 4


def test_a_reviewer_undoes_a_case_from_the_toast_on_pages_that_fit_with_the_sidebar_open(
        chromium, live_server, django_user_model, settings):
    """A new reviewer's browser (the admin's sidebar open, as it comes) at 1440 px: the case list and a
    case page fit without scrolling sideways; `a` approves a case and the next page's toast takes it back."""
    settings.KINTSUGI_UNDO_SECONDS = 60
    ensure_roles()
    lead = _person(django_user_model, "lead", SUPPORT_LEAD)
    _person(django_user_model, "reviewer", REVIEWER)
    incident = repaired_incident(flagger=lead, workspace=f"undo-{uuid.uuid4().hex[:6]}")
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        console = []
        page.on("console", lambda message: console.append(message.text))
        page.goto("/admin/login/?next=/admin/")
        page.fill("#id_username", "reviewer")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        page.goto(f"/admin/compensation/compensationitem/cases/?incident={incident.pk}")
        assert page.locator("#nav-sidebar").is_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.keyboard.press("j")
        page.wait_for_url(re.compile(r"/cases/\d+/t04/"))
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert not page.locator("#undo-toast").count()
        page.keyboard.press("a")
        page.wait_for_url(re.compile(r"/cases/\d+/t05/"))
        toast = page.locator("#undo-toast")
        assert toast.is_visible() and "Case t04:" in toast.inner_text()
        assert set(incident.compensation_items.filter(ticket_id="t04").values_list("status", flat=True)) == {St.APPROVED}
        toast.locator("button").click()
        page.wait_for_url(re.compile(r"/cases/\d+/t04/"))
        assert page.locator("#case-state").inner_text() == "needs decision"
        assert not page.locator("#undo-toast").count()
        assert set(incident.compensation_items.filter(ticket_id="t04").values_list("status", flat=True)) == {St.PENDING}
        assert not [m for m in console if "Content Security Policy" in m or "Content-Security-Policy" in m], console
    finally:
        context.close()
