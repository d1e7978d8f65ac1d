"""Agent registrations and recording tokens in the admin: a Workspace admin registers and re-points
agents, issues a token whose key is shown once and revokes it; the services write the rows and the
audit events; other roles and other teams' workspaces are refused with nothing written."""
from __future__ import annotations

import hashlib
import uuid

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from compensation.models import AuditEvent
from core.roles import REVIEWER, SUPPORT_LEAD, WORKSPACE_ADMIN
from provenance.models import AgentRegistration, AgentToken, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent

pytestmark = pytest.mark.django_db

ADD_URL = "admin:provenance_agentregistration_add"
ISSUE_URL = "admin:provenance_agenttoken_issue"


@pytest.fixture
def teams(make_user):
    tag = uuid.uuid4().hex[:6]
    a, b = Workspace.objects.create(name=f"agents-a-{tag}"), Workspace.objects.create(name=f"agents-b-{tag}")
    people = {"admin": make_user(f"ws-admin-{tag}", WORKSPACE_ADMIN, member_of=a),
              "lead": make_user(f"lead-{tag}", SUPPORT_LEAD, member_of=a),
              "reviewer": make_user(f"reviewer-{tag}", REVIEWER, member_of=a)}
    b_agent, _ = register_agent(workspace=b, name="b_triage", replay="http://agents-b.example:9100/replay", actor=None,
                                reason="b's agent", via="cli")
    b_token, _ = issue_agent_token(workspace=b, label="b desk", actor=None, reason="b's token", via="cli")
    return a, b, people, b_agent, b_token


def _register(client, workspace, **fields):
    data = {"workspace": workspace.pk, "name": "desk_triage", "replay": "http://desk-agent:9100/replay",
            "timeout_seconds": 30, "reason": "the triage service", **fields}
    return client.post(reverse(ADD_URL), data)


def _rows():
    return (list(AgentRegistration.objects.order_by("pk").values_list("pk", "name", "replay_url", "timeout_seconds")),
            list(AgentToken.objects.order_by("pk").values_list("pk", "label", "revoked_at")),
            AuditEvent.objects.exclude(action="refused").count())


def test_a_workspace_admin_registers_and_repoints_an_agent_through_the_service(teams, client):
    a, _, people, _, _ = teams
    client.force_login(people["admin"])
    assert client.get(reverse(ADD_URL)).status_code == 200
    # A host without a dot (a compose service's name) is the service's to accept, not URLField's to refuse.
    response = _register(client, a)
    assert response.status_code == 302, response.content.decode()[:2000]
    reg = AgentRegistration.objects.get(workspace=a, name="desk_triage")
    assert (reg.replay_url, reg.timeout_seconds, reg.created_by) == ("http://desk-agent:9100/replay", 30,
                                                                     people["admin"])
    event = AuditEvent.objects.get(action="agent.registered", subject_id="desk_triage")
    assert (event.workspace_id, event.actor, event.via, event.reason) == (a.pk, people["admin"], "admin",
                                                                          "the triage service")
    page = client.get(reverse("admin:provenance_agentregistration_changelist")).content.decode()
    assert reg.replay_secret in page  # shown once, on the page after the registration...
    assert reg.replay_secret not in client.get(reverse("admin:provenance_agentregistration_change",
                                                       args=[reg.pk])).content.decode()  # ...and never again
    assert "desk-agent:9100" in page and "desk_triage" in page

    change = reverse("admin:provenance_agentregistration_change", args=[reg.pk])
    assert client.get(change).status_code == 200
    response = client.post(change, {"replay": "https://agents.example/replay", "timeout_seconds": 90,
                                    "reason": "moved to TLS"})
    assert response.status_code == 302
    reg.refresh_from_db()
    assert (reg.replay_url, reg.timeout_seconds) == ("https://agents.example/replay", 90)
    changed = AuditEvent.objects.get(action="agent.changed", subject_id="desk_triage")
    assert changed.reason == "moved to TLS" and changed.data["timeout_seconds"] == 90
    # No reason: the form says so and nothing changes.
    before = _rows()
    response = client.post(change, {"replay": "https://elsewhere.example/replay", "timeout_seconds": 90, "reason": " "})
    assert response.status_code == 200 and "Give a reason" in response.content.decode()
    assert _rows() == before


@pytest.mark.parametrize("fields, message", [
    ({"name": "triage"}, "in-process agent"),
    ({"replay": "ftp://desk-agent/replay"}, "http:// or https://"),
    ({"replay": "http://user:pw@desk-agent/replay"}, "must not carry credentials"),
    ({"timeout_seconds": 0}, "from 1 to 600"),
    ({"name": "bad name!"}, "agent name must match"),
    ({"reason": ""}, "Give a reason"),
])
def test_the_service_s_checks_show_on_the_form_and_nothing_is_written(teams, client, fields, message):
    a, _, people, _, _ = teams
    client.force_login(people["admin"])
    before = _rows()
    response = _register(client, a, **fields)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert _rows() == before


def test_registering_needs_the_workspace_admin_role(teams, client):
    a, _, people, _, _ = teams
    for role in ("lead", "reviewer"):
        client.force_login(people[role])
        before = _rows()
        assert client.get(reverse(ADD_URL)).status_code == 403
        assert _register(client, a).status_code == 403
        assert client.get(reverse("admin:provenance_agentregistration_changelist")).status_code == 403
        assert _rows() == before


def test_another_team_s_workspace_and_registration_are_out_of_reach(teams, client):
    a, b, people, b_agent, _ = teams
    client.force_login(people["admin"])
    form = client.get(reverse(ADD_URL)).content.decode()
    assert a.name in form and b.name not in form
    before = _rows()
    response = _register(client, b)
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    change = reverse("admin:provenance_agentregistration_change", args=[b_agent.pk])
    assert client.get(change).status_code == 404
    assert client.post(change, {"replay": "http://evil.example/replay", "timeout_seconds": 5,
                                "reason": "x"}).status_code == 404
    assert client.post(reverse("admin:provenance_agentregistration_delete", args=[b_agent.pk]),
                       {"post": "yes"}).status_code in (403, 404)
    assert _rows() == before
    listing = client.get(reverse("admin:provenance_agentregistration_changelist")).content.decode()
    assert "b_triage" not in listing and b.name not in listing


def test_an_issued_key_is_shown_once_escaped_and_stops_authenticating_when_revoked(teams, client, django_capture_on_commit_callbacks):
    a, _, people, _, _ = teams
    client.force_login(people["admin"])
    assert _register(client, a, name="desk_faq", replay="http://127.0.0.1:9/replay").status_code == 302
    form = client.get(reverse(ISSUE_URL))
    assert form.status_code == 200 and a.name in form.content.decode()
    label = "<script>alert(1)</script> desk"
    response = client.post(reverse(ISSUE_URL), {"workspace": a.pk, "label": label, "agents": "desk_faq",
                                                "reason": "the faq service"})
    assert response.status_code == 200
    page = response.content.decode()
    token = AgentToken.objects.get(workspace=a)
    key = response.context["key"]
    assert key.startswith("kag_") and page.count(key) == 1
    assert "shown only on this page and never again" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "no-store" in response["Cache-Control"]
    assert (token.label, token.agents, token.created_by) == (label, ["desk_faq"], people["admin"])
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    issued = AuditEvent.objects.get(action="agent_token.issued", subject_id=str(token.pk))
    assert issued.reason == "the faq service" and key not in str(issued.data)
    # Never again: not on the list, nor on the token's page; nor its hash.
    for url in (reverse("admin:provenance_agenttoken_changelist"),
                reverse("admin:provenance_agenttoken_change", args=[token.pk])):
        shown = client.get(url)
        assert shown.status_code == 200
        assert key not in shown.content.decode() and token.key_hash not in shown.content.decode()
        assert token.prefix in shown.content.decode()

    recorder = APIClient()
    recorder.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    # The staged copy of a recording is published after its row commits (provenance.recording.staging).
    with django_capture_on_commit_callbacks(execute=True):
        opened = recorder.post("/api/v1/recording/actions/", {"agent": "desk_faq", "payload": {"topic": "x"}},
                               format="json")
    assert opened.status_code == 201, opened.content
    abandoned = recorder.post(f"/api/v1/recording/actions/{opened.json()['action']}/abandon/", {"reason": "a test"},
                              format="json")
    assert abandoned.status_code == 200, abandoned.content

    revoke = reverse("admin:provenance_agenttoken_revoke", args=[token.pk])
    assert client.get(revoke).status_code == 200
    refused = client.post(revoke, {"reason": "  "})
    assert refused.status_code == 400 and "reason is required" in refused.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None
    assert client.post(revoke, {"reason": "the faq service was retired"}).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    revoked = AuditEvent.objects.get(action="agent_token.revoked", subject_id=str(token.pk))
    assert (revoked.actor, revoked.via, revoked.reason) == (people["admin"], "admin", "the faq service was retired")
    again = recorder.post("/api/v1/recording/actions/", {"agent": "desk_faq", "payload": {"topic": "x"}}, format="json")
    assert again.status_code == 401 and again.json()["error"]["code"] == "authentication_failed"
    assert "was revoked" in client.get(revoke).content.decode()


def test_issuing_and_revoking_need_the_role(teams, client):
    a, _, people, _, _ = teams
    token, _ = issue_agent_token(workspace=a, label="a desk", actor=people["admin"], reason="r", via="admin")
    before = _rows()
    for role in ("lead", "reviewer"):
        client.force_login(people[role])
        for response in (client.get(reverse(ISSUE_URL)),
                         client.post(reverse(ISSUE_URL), {"workspace": a.pk, "label": "x", "reason": "x"})):
            assert response.status_code == 403
            assert "Workspace admin role" in response.content.decode()
        refused = client.post(reverse("admin:provenance_agenttoken_revoke", args=[token.pk]), {"reason": "x"})
        assert refused.status_code == 403 and "nothing was revoked" in refused.content.decode()
    assert _rows() == before


def test_another_team_s_tokens_are_out_of_reach_and_the_attempt_is_on_our_record(teams, client):
    a, b, people, _, b_token = teams
    client.force_login(people["admin"])
    before = _rows()
    refusals = AuditEvent.objects.filter(action="refused", actor=people["admin"]).count()
    issued = client.post(reverse(ISSUE_URL), {"workspace": b.pk, "label": "mine now", "reason": "x"})
    assert issued.status_code == 404 and "nothing was issued" in issued.content.decode()
    revoke = reverse("admin:provenance_agenttoken_revoke", args=[b_token.pk])
    assert client.get(revoke).status_code == 404
    refused = client.post(revoke, {"reason": "x"})
    assert refused.status_code == 404 and "nothing was revoked" in refused.content.decode()
    assert client.get(reverse("admin:provenance_agenttoken_change", args=[b_token.pk])).status_code == 404
    assert _rows() == before
    b_token.refresh_from_db()
    assert b_token.revoked_at is None
    attempts = AuditEvent.objects.filter(action="refused", actor=people["admin"])
    assert attempts.count() == refusals + 2 and set(attempts.values_list("workspace_id", flat=True)) == {a.pk}
    listing = client.get(reverse("admin:provenance_agenttoken_changelist")).content.decode()
    assert "b desk" not in listing and b_token.prefix not in listing


def test_a_superuser_sees_every_team_s_agents_and_tokens(teams, client, make_user):
    _, b, _, _, b_token = teams
    client.force_login(make_user(f"root-{uuid.uuid4().hex[:4]}", is_superuser=True))
    assert "b_triage" in client.get(reverse("admin:provenance_agentregistration_changelist")).content.decode()
    listing = client.get(reverse("admin:provenance_agenttoken_changelist")).content.decode()
    assert "b desk" in listing and b_token.prefix in listing and "Issue a token" in listing
