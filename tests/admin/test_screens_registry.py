"""The admin's URL registry is the list of screens: every URL name is a screen of a lead, a reviewer or an
auditor (walked at 390 px and 1440 px by tests/browser/test_every_screen.py, photographed by
`manage.py screenshots`) or says why it is not one. A page added to the admin without either fails here."""
from kintsugi_site import screens


def test_every_admin_url_is_a_screen_or_says_why_not():
    assert screens.unlisted() == []


def test_a_new_admin_page_would_be_named(monkeypatch):
    # The red case: a page the admin serves that nobody listed.
    names = screens.admin_url_names() | {"repairs_incident_timeline"}
    monkeypatch.setattr(screens, "admin_url_names", lambda: names)
    assert screens.unlisted() == ["repairs_incident_timeline"]


def test_every_screen_is_an_admin_url_and_every_role_has_its_first_screen():
    names = screens.admin_url_names()
    assert {s.name for s in screens.SCREENS} <= names
    assert not {s.name for s in screens.SCREENS} & {n for n in names if screens.not_a_screen(n)}
    first = {s.role: s.name for s in reversed(screens.SCREENS)}  # each role's first screen
    assert first == {"lead": "index", "reviewer": "compensation_compensationitem_cases",
                     "auditor": "compensation_auditevent_changelist"}
    shots = [s.shot for s in screens.SCREENS if s.shot]
    assert len(shots) == len(set(shots))
