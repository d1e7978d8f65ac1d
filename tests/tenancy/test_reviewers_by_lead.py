"""Membership without a superuser: a workspace's Support lead (or its Workspace admin) adds and removes
Reviewers on the workspace's members page, each change audited with who and why; a lead adds only
Reviewers the workspace may see, removes only people who are Reviewers alone, and another workspace's
page is a 404."""
from __future__ import annotations

import pytest
from django.urls import reverse

from compensation.models import AuditEvent
from provenance.access import membership
from provenance.models import Workspace
from tests.helpers import create_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    ws, other = Workspace.objects.create(name="team-a"), Workspace.objects.create(name="team-b")
    lead = create_user("lead-a", "Support lead", workspaces=[ws])
    helper = create_user("helper-<i>", "Reviewer")
    ws.visible_users.add(helper)
    return type("Team", (), {"ws": ws, "other": other, "lead": lead, "helper": helper,
                             "outsider": create_user("outsider", "Reviewer"),
                             "co_lead": create_user("co-lead", "Support lead", "Reviewer", workspaces=[ws]),
                             "reviewer": create_user("rev-a", "Reviewer", workspaces=[ws]),
                             "lead_b": create_user("lead-b", "Support lead", workspaces=[other])})


def _members(ws) -> set[str]:
    return set(ws.members.values_list("username", flat=True))


def test_a_lead_adds_and_removes_a_reviewer_on_the_members_page_audited(team, client):
    client.force_login(team.lead)
    url = reverse("admin:provenance_workspace_members", args=[team.ws.pk])
    page = client.get(url).content.decode()
    assert "helper-&lt;i&gt;" in page and "helper-<i>" not in page and "outsider" not in page
    client.post(url, {"do": "add", "user": team.helper.pk, "reason": "help with the refund incident"})
    assert "helper-<i>" in _members(team.ws)
    added = AuditEvent.objects.filter(subject_type="workspace", subject_id=str(team.ws.pk)).latest("seq")
    assert added.actor == team.lead and added.reason == "help with the refund incident"
    assert added.data["user"] == "helper-<i>"
    client.post(url, {"do": "remove", "user": team.helper.pk, "reason": "incident closed"})
    assert "helper-<i>" not in _members(team.ws)
    removed = AuditEvent.objects.filter(subject_type="workspace", subject_id=str(team.ws.pk)).latest("seq")
    assert removed.actor == team.lead and removed.reason == "incident closed" and removed.action != added.action


def test_a_lead_may_not_add_anyone_nor_remove_another_lead(team, client):
    client.force_login(team.lead)
    url = reverse("admin:provenance_workspace_members", args=[team.ws.pk])
    before = _members(team.ws)
    client.post(url, {"do": "add", "user": team.outsider.pk, "reason": "poach"})  # not visible to this workspace
    client.post(url, {"do": "add", "user": team.lead_b.pk, "reason": "poach"})  # not a Reviewer
    client.post(url, {"do": "remove", "user": team.co_lead.pk, "reason": "coup"})  # more than a Reviewer
    client.post(url, {"do": "add", "user": team.helper.pk, "reason": ""})  # no reason
    assert _members(team.ws) == before
    with pytest.raises(membership.MembershipRefused):
        membership.remove_reviewer(workspace=team.ws, user=team.co_lead, actor=team.lead, reason="coup", via="cli")
    membership.remove_reviewer(workspace=team.ws, user=team.reviewer, actor=team.lead, reason="left", via="cli")
    assert "rev-a" not in _members(team.ws)


def test_another_workspaces_members_page_is_a_404_and_a_reviewer_is_refused(team, client):
    client.force_login(team.lead_b)
    url = reverse("admin:provenance_workspace_members", args=[team.ws.pk])
    assert client.get(url).status_code == 404
    assert client.post(url, {"do": "add", "user": team.helper.pk, "reason": "x"}).status_code == 404
    assert "helper-<i>" not in _members(team.ws)
    client.force_login(team.reviewer)
    response = client.get(url)
    assert response.status_code == 403 and "Support lead" in response.content.decode()
