"""Every screen of a lead, a reviewer and an auditor (kintsugi_site.screens, listed from the admin's URL
registry) at 390 px and 1440 px: the page never scrolls sideways, no two visible controls overlap, and the
email a reviewer approves is shown on the case page and in the bulk confirmation."""
from __future__ import annotations

import pytest

from compensation.models import CompensationItem
from kintsugi_site import screens

pytestmark = [pytest.mark.browser]


def test_every_screen_fits_a_phone_and_a_desktop_with_no_overlapping_controls(chromium, live_server):
    desk = screens.build_desk()
    found, console = {}, []
    for label, viewport in screens.VIEWPORTS.items():
        pages = {}
        for screen in screens.SCREENS:
            if screen.role not in pages:
                pages[screen.role] = screens.sign_in(chromium, live_server.url, desk.people[screen.role], viewport)
                pages[screen.role].on("console", lambda m: console.append(m.text))
            page = pages[screen.role]
            screens.open_screen(page, screen, desk)
            for problem in screens.problems(page, screen):
                found.setdefault(f"{screen.label or screen.name} at {viewport['width']} px", []).append(problem)
        for page in pages.values():
            page.context.close()
    assert found == {}, "\n".join(f"{where}: {'; '.join(what)}" for where, what in sorted(found.items()))
    assert not [m for m in console if "Content Security Policy" in m or "Content-Security-Policy" in m], console
    # The bulk confirmation only showed what would happen.
    assert not desk.incident.compensation_items.exclude(status=CompensationItem.Status.PENDING).exists()


def test_the_measure_finds_a_page_wider_than_the_window_and_overlapping_buttons(chromium):
    # The red case of the check above: a page that scrolls sideways, two buttons on top of each other, and
    # an email body pushed past the window's edge.
    context = chromium.new_context(viewport=screens.VIEWPORTS["phone"])
    page = context.new_page()
    page.set_content('<div style="width:600px">wide</div><button style="position:absolute;left:0;top:0">A</button>'
                     '<button style="position:absolute;left:5px;top:2px">B</button>'
                     '<div id="case-messages"><div class="message-body" style="margin-left:500px">Dear</div></div>')
    case = next(s for s in screens.SCREENS if s.name == "compensation_compensationitem_case")
    found = screens.problems(page, case)
    context.close()
    assert found[0] == "218 px wider than the window (div past its edge)"
    assert 'controls overlap: button "A" / button "B"' in found and "the email body is not shown" in found


def test_the_measure_finds_a_page_whose_stylesheet_did_not_load(chromium, live_server):
    # An unstyled page has nothing wide and nothing overlapping: without this check it passed every measure
    # (the screenshots command served the deployment's hashed static names it could not find).
    context = chromium.new_context(viewport=screens.VIEWPORTS["desktop"])
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    assert screens.problems(page, screens.SCREENS[0]) == []
    page.set_content(f'<link rel="stylesheet" href="{live_server.url}/static/admin/css/base.0123456789ab.css">'
                     '<p>unstyled</p>')
    found = screens.problems(page, screens.SCREENS[0])
    context.close()
    assert found and found[0].startswith("unstyled: ") and "base.0123456789ab.css" in found[0], found
