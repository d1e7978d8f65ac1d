"""Membership is managed, not assumed: who may change it, and every change on the system chain."""
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


_user = create_user


@pytest.fixture
def desks():
    return Workspace.objects.create(name="desk-a"), Workspace.objects.create(name="desk-b")


def _events(action):
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def test_a_workspace_admin_manages_their_own_workspace_only(desks):
    a, b = desks
    admin_a = _user("wsadmin", WORKSPACE_ADMIN)
    a.members.add(admin_a)
    newcomer = _user("newcomer", REVIEWER)
    membership.set_visible_users(workspace=a, users=[newcomer], actor=_user("root0", is_superuser=True),
                                 reason="hired for desk a", via="admin")
    added, removed = membership.set_members(workspace=a, users=[admin_a, newcomer], actor=admin_a,
                                            reason="joins the team", via="admin")
    assert added == [newcomer] and removed == []
    assert set(a.members.all()) == {admin_a, newcomer}
    with pytest.raises(membership.MembershipRefused):
        membership.set_members(workspace=b, users=[admin_a], actor=admin_a, reason="sneak in", via="admin")
    assert not b.members.exists()
    reviewer = _user("plain-reviewer", REVIEWER)
    a.members.add(reviewer)
    with pytest.raises(membership.MembershipRefused):  # a member without the role may not change it
        membership.remove_member(workspace=a, user=newcomer, actor=reviewer, reason="no", via="admin")
    with pytest.raises(ValueError):
        membership.remove_member(workspace=a, user=newcomer, actor=admin_a, reason="  ", via="admin")


def test_every_membership_change_is_on_the_system_chain_attributed_or_not(desks):
    a, _ = desks
    root = _user("root", is_superuser=True)
    person = _user("person")
    membership.add_member(workspace=a, user=person, actor=root, reason="hired", via="cli")
    membership.remove_member(workspace=a, user=person, actor=root, reason="left", via="cli")
    a.members.add(person)  # around the services: still recorded, as unattributed
    added, removed = _events("membership.added"), _events("membership.removed")
    assert [(e.actor_name, e.reason, e.data["user"], e.data["workspace"]) for e in added] == [
        ("root", "hired", "person", "desk-a"), ("", "membership changed outside kintsugi's services (unattributed)",
                                                "person", "desk-a")]
    assert [(e.actor_name, e.reason) for e in removed] == [("root", "left")]
    assert {e.workspace_id for e in added + removed} == {None}  # the system chain


def test_the_admin_changes_members_through_the_service_with_a_reason(desks, client):
    a, b = desks
    admin_a = _user("wsadmin2", WORKSPACE_ADMIN)
    a.members.add(admin_a)
    newcomer = _user("newcomer2")
    a.visible_users.add(newcomer)
    client.force_login(admin_a)
    url = reverse("admin:provenance_workspace_change", args=[a.pk])
    no_reason = client.post(url, {"members": [admin_a.pk, newcomer.pk], "membership_reason": ""})
    assert no_reason.status_code == 200 and "Give a reason" in no_reason.content.decode()
    assert set(a.members.all()) == {admin_a}
    client.post(url, {"members": [admin_a.pk, newcomer.pk], "membership_reason": "on call this week"})
    assert set(a.members.all()) == {admin_a, newcomer}
    event = _events("membership.added")[-1]
    assert (event.actor_name, event.via, event.reason) == ("wsadmin2", "admin", "on call this week")
    other = client.post(reverse("admin:provenance_workspace_change", args=[b.pk]),
                        {"members": [admin_a.pk], "membership_reason": "x"})
    assert other.status_code == 404 and not b.members.exists()


def test_the_command_line_changes_members_as_the_named_user(desks, capsys):
    a, b = desks
    root = _user("root3", is_superuser=True)
    _user("alice")
    call_command("workspace_members", "--workspace", "desk-a", "--add", "alice", "--user", "root3",
                 "--reason", "joins", "--json")
    assert '"added": [\n    "alice"' in capsys.readouterr().out
    assert list(a.members.values_list("username", flat=True)) == ["alice"]
    _user("mallory", WORKSPACE_ADMIN)
    with pytest.raises(SystemExit) as exit_:
        call_command("workspace_members", "--workspace", "desk-b", "--add", "mallory", "--user", "mallory",
                     "--reason", "me too")
    assert exit_.value.code == 2 and "may not change the members" in capsys.readouterr().err
    assert not b.members.exists()
    assert root.is_superuser
