"""The right door for each role after signing in, and a refusal page that says why."""
from __future__ import annotations

import pytest

from tests.helpers import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("who, lands", [("reviewer", "/admin/compensation/compensationitem/cases/"),
                                        ("lead", "/admin/"),
                                        ("auditor", "/admin/compensation/auditevent/")])
def test_each_role_lands_on_its_own_page(canonical, client, who, lands):
    user = getattr(canonical.people, who)
    response = client.post("/admin/login/", {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == lands
    # A link someone followed to the login page still wins.
    client.logout()
    asked = client.post("/admin/login/?next=/admin/repairs/incident/",
                        {"username": user.username, "password": PASSWORD, "next": "/admin/repairs/incident/"})
    assert asked["Location"] == "/admin/repairs/incident/"


def test_a_refusal_is_a_page_that_says_why(canonical, client):
    client.force_login(canonical.people.auditor)  # reads everything, decides nothing
    response = client.post("/admin/compensation/compensationitem/cases/bulk/", {"decision": "approve", "case": ["1/t1"]})
    page = response.content.decode()
    assert response.status_code == 403
    assert "deciding and assigning cases needs the Reviewer role" in page and "Ask a workspace admin" in page


def test_the_audit_trail_finds_a_ticket_and_a_customer(canonical, client):
    from compensation.review.services import reject_item

    incident, reviewer = canonical.incident, canonical.people.reviewer
    item = incident.compensation_items.filter(ticket_id="t05").first()
    reject_item(item=item, actor=reviewer, reason="kept the goods", via="admin")
    client.force_login(canonical.people.auditor)
    for term in ("t05", item.facts["customer"].split()[0]):
        page = client.get("/admin/compensation/auditevent/", {"q": term}).content.decode()
        assert "kept the goods" in page, term
    assert "kept the goods" not in client.get("/admin/compensation/auditevent/", {"q": "t04"}).content.decode()
