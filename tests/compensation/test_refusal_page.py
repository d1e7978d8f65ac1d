"""A refusal says what is needed and who can give it: the 403 page in kintsugi's own frame (header, user
menu) names the role the page needs and the workspace's admins; a case page tells the flagger why its
decisions are not theirs (four-eyes) and a lead without the Reviewer role why there is nothing to press."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.helpers import create_user

pytestmark = pytest.mark.django_db


def _case_url(incident, ticket):
    return reverse("admin:compensation_compensationitem_case", args=[incident.pk, ticket])


def test_the_403_names_the_role_needed_and_the_workspace_admins(canonical, client):
    workspace = canonical.incident.workspace
    create_user("ws-admin-<b>", "Workspace admin", workspaces=[workspace], email="admin@example.com")
    client.force_login(canonical.people.auditor)
    response = client.post(reverse("admin:compensation_compensationitem_cases_next"),
                           {"incident": canonical.incident.pk, "count": "5"})
    page = response.content.decode()
    assert response.status_code == 403
    assert "Django administration" not in page and "kintsugi" in page and 'id="logout-form"' in page
    assert "This needs the <strong>Reviewer</strong> role" in page
    assert "ws-admin-&lt;b&gt;" in page and "admin@example.com" in page and "ws-admin-<b>" not in page
    # A refusal that names no role: the part of the admin it is in says which.
    client.force_login(canonical.people.reviewer)
    source = workspace.sources.get(source_id=canonical.incident.source_id)
    page = client.get(reverse("admin:provenance_source_flag", args=[source.pk])).content.decode()
    assert "This needs the <strong>Support lead</strong> role" in page


def test_a_flagger_is_told_four_eyes_keeps_the_decision_from_them(canonical, client):
    incident = canonical.incident
    assert incident.flagged_by == canonical.people.lead_reviewer
    client.force_login(canonical.people.lead_reviewer)
    page = client.get(_case_url(incident, "t05")).content.decode()
    assert 'id="why-no-decide"' in page and "four-eyes" in page and 'id="approve-case"' not in page
    client.force_login(canonical.people.lead)
    page = client.get(_case_url(incident, "t05")).content.decode()
    assert "Deciding needs the Reviewer role" in page
    client.force_login(canonical.people.reviewer)
    page = client.get(_case_url(incident, "t05")).content.decode()
    assert 'id="why-no-decide"' not in page and 'id="approve-case"' in page
