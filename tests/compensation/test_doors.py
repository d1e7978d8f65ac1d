"""The right door for each role after signing in, and a refusal page that says why."""
from __future__ import annotations

import pytest

from tests.helpers import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("who, lands", [("reviewer", "/admin/compensation/compensationitem/cases/"),
                                        ("lead", "/admin/"),
                                        ("auditor", "/admin/compensation/auditevent/")])
def test_each_role_lands_on_its_own_page(people, client, who, lands):
    user = getattr(people, who)
    response = client.post("/admin/login/", {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == lands
    # A link someone followed to the login page still wins.
    client.logout()
    asked = client.post("/admin/login/?next=/admin/repairs/incident/",
                        {"username": user.username, "password": PASSWORD, "next": "/admin/repairs/incident/"})
    assert asked["Location"] == "/admin/repairs/incident/"


def test_a_refusal_is_a_page_that_says_why(people, client):
    client.force_login(people.auditor)  # reads everything, decides nothing
    response = client.post("/admin/compensation/compensationitem/cases/bulk/", {"decision": "approve", "case": ["1/t1"]})
    page = response.content.decode()
    assert response.status_code == 403
    assert "deciding and assigning cases needs the Reviewer role" in page and "Ask a workspace admin" in page
