"""The members picker: a Workspace admin finds (and may add) only the members of the workspaces they
administer and the users a superuser made visible to one of those; other teams' people stay out of
sight, in the autocomplete, the form and the service alike."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from compensation.models import AuditEvent
from core.roles import REVIEWER, WORKSPACE_ADMIN
from provenance.access import membership
from provenance.models import Workspace
from tests.helpers import create_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams():
    a, b = Workspace.objects.create(name="team-a"), Workspace.objects.create(name="team-b")
    people = {name: create_user(name, *roles) for name, roles in {
        "admin-a": [WORKSPACE_ADMIN], "ann": [REVIEWER], "bob": [REVIEWER], "hire": [REVIEWER],
        "root": []}.items()}
    people["root"].is_superuser = True
    people["root"].save()
    a.members.add(people["admin-a"], people["ann"])
    b.members.add(people["bob"])
    return a, b, people


def found(client, term: str = "") -> set[str]:
    answer = client.get(reverse("admin:autocomplete"), {"app_label": "provenance", "model_name": "workspace",
                                                        "field_name": "members", "term": term})
    assert answer.status_code == 200, answer.status_code
    return {r["text"] for r in answer.json()["results"]}


def test_the_autocomplete_lists_only_the_people_the_admin_may_see(teams, client):
    a, _, people = teams
    client.force_login(people["admin-a"])
    assert found(client) == {"admin-a", "ann"}
    assert found(client, "bo") == set()  # another team's user, even searched for by name
    membership.set_visible_users(workspace=a, users=[people["hire"]], actor=people["root"],
                                 reason="joins team a next week", via="admin")
    assert found(client) == {"admin-a", "ann", "hire"}
    event = AuditEvent.objects.get(action="visibility.added")
    assert (event.actor_name, event.data["user"], event.data["workspace"]) == ("root", "hire", "team-a")
    client.force_login(people["root"])
    assert found(client) >= {"admin-a", "ann", "bob", "hire", "root"}


def test_someone_without_the_role_gets_no_list(teams, client):
    client.force_login(teams[2]["ann"])
    answer = client.get(reverse("admin:autocomplete"), {"app_label": "provenance", "model_name": "workspace",
                                                        "field_name": "members", "term": ""})
    assert answer.status_code == 403


def test_an_unseen_user_is_refused_by_the_form_the_service_and_the_command_line(teams, client, capsys):
    a, b, people = teams
    client.force_login(people["admin-a"])
    url = reverse("admin:provenance_workspace_change", args=[a.pk])
    page = client.get(url).content.decode()
    assert "bob" not in page and "visible_users" not in page  # visibility is a superuser's decision
    answer = client.post(url, {"members": [people["admin-a"].pk, people["ann"].pk, people["bob"].pk],
                               "membership_reason": "poach"})
    assert answer.status_code == 200 and "Select a valid choice" in answer.content.decode()
    with pytest.raises(membership.MembershipRefused, match="outside the members picker"):
        membership.add_member(workspace=a, user=people["bob"], actor=people["admin-a"], reason="poach", via="cli")
    with pytest.raises(SystemExit) as exit_:
        call_command("workspace_members", "--workspace", "team-a", "--add", "bob", "--user", "admin-a",
                     "--reason", "poach")
    assert exit_.value.code == 2 and "outside the members picker" in capsys.readouterr().err
    with pytest.raises(membership.MembershipRefused):  # only a superuser widens what an admin sees
        membership.set_visible_users(workspace=a, users=[people["bob"]], actor=people["admin-a"], reason="x",
                                     via="admin")
    assert set(a.members.all()) == {people["admin-a"], people["ann"]} and not a.visible_users.exists()
    # A member of the admin's own workspace, and a user made visible, may be added.
    a.visible_users.add(people["hire"])
    assert membership.add_member(workspace=a, user=people["hire"], actor=people["admin-a"], reason="hired", via="cli")


def test_a_superuser_sets_the_visible_users_in_the_admin_with_a_reason(teams, client):
    a, _, people = teams
    client.force_login(people["root"])
    url = reverse("admin:provenance_workspace_change", args=[a.pk])
    members = [people["admin-a"].pk, people["ann"].pk]
    assert "visible_users" in client.get(url).content.decode()
    client.post(url, {"name": "team-a", "members": members, "visible_users": [people["hire"].pk],
                      "membership_reason": "joins next week"})
    assert list(a.visible_users.all()) == [people["hire"]]
    assert AuditEvent.objects.get(action="visibility.added").reason == "joins next week"
