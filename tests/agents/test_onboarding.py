"""A Workspace admin sets up a workspace for its agents through the API and the command line, without a
superuser; other roles and other workspaces are refused with nothing written."""
import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compensation.models import AuditEvent
from provenance.models import AgentRegistration, AgentToken, Source, Ticket, Workspace
from tests.helpers import client_for

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = {"customer_name": "Ana", "customer_email": "ana@example.com", "subject": "Refund", "body": "Broken lamp",
          "amount_cents": 4500}


def test_workspace_admin_onboards_a_workspace_and_its_agents_through_the_api(make_user, settings):
    settings.KINTSUGI_EGRESS_ALLOW = ["10.0.0.0/8"]  # an agent on the premises, allowed by the operator
    admin = make_user("wsadmin", roles=["Workspace admin"])
    api = client_for(admin)
    created = api.post("/api/v1/workspaces/", {"name": "desk-a", "reason": "our desk"}, format="json")
    assert created.status_code == 201, created.content
    ws = Workspace.objects.get(name="desk-a")
    assert list(ws.members.all()) == [admin]
    base = f"/api/v1/workspaces/{ws.pk}"
    assert api.post(f"{base}/sources/", {"source_id": "kb/returns", "content": "Full refund.", "reason": "r"},
                    format="json").status_code == 201
    assert api.patch(f"{base}/sources/", {"source_id": "kb/returns", "content": "Partial refund.", "reason": "fix"},
                     format="json").status_code == 200
    assert Source.objects.get(workspace=ws).content == "Partial refund."
    assert api.post(f"{base}/sources/", {"source_id": "blog/tips", "content": "Tips.", "trust": "untrusted",
                                         "reason": "a partner blog"}, format="json").json()["source_id"] == "blog/tips"
    assert Source.objects.get(source_id="blog/tips").trust == "untrusted"
    # Changing a source's trust later is a Support lead's call, not the Workspace admin's: nothing changes.
    assert api.patch(f"{base}/sources/", {"source_id": "blog/tips", "content": "Tips!", "trust": "trusted",
                                          "reason": "r"}, format="json").status_code == 403
    assert Source.objects.get(source_id="blog/tips").content == "Tips."
    assert api.post(f"{base}/tickets/", {"ticket_id": "t1", "reason": "r", **TICKET}, format="json").status_code == 201
    assert api.patch(f"{base}/tickets/", {"ticket_id": "t1", "reason": "typo", "customer_name": "Anna"},
                    format="json").json()["customer"] == "Anna"
    reg = api.post(f"{base}/agents/", {"name": "remote_triage", "replay_url": "http://10.0.0.5:9100/replay", "reason": "r"},
                   format="json")
    assert reg.status_code == 200 and api.get(f"{base}/agents/").json()[0]["name"] == "remote_triage"
    issued = api.post(f"{base}/agent-tokens/", {"label": "desk", "agents": ["remote_triage"], "reason": "r"}, format="json")
    assert issued.status_code == 201 and issued.json()["key"].startswith("kag_")
    listed = api.get(f"{base}/agent-tokens/").json()
    assert "key" not in listed[0] and listed[0]["agents"] == ["remote_triage"]
    revoked = api.post(f"{base}/agent-tokens/{listed[0]['id']}/revoke/", {"reason": "leaked"}, format="json")
    assert revoked.json()["revoked_at"]
    actions = set(AuditEvent.objects.filter(actor=admin).values_list("action", flat=True))
    assert {"workspace.created", "source.created", "source.changed", "ticket.created", "ticket.changed",
            "agent.registered", "agent_token.issued", "agent_token.revoked"} <= actions
    assert not AgentToken.objects.filter(revoked_at__isnull=True).exists()


def test_other_roles_and_other_workspaces_are_refused_with_nothing_written(make_user):
    other = Workspace.objects.create(name="not-yours")
    lead = make_user("lead", roles=["Support lead"], workspaces=[other])
    outsider = make_user("outsider-admin", roles=["Workspace admin"])
    assert client_for(lead).post("/api/v1/workspaces/", {"name": "x", "reason": "r"},
                                 format="json").json()["error"]["code"] == "permission_denied"
    assert client_for(lead).post(f"/api/v1/workspaces/{other.pk}/agents/", {
        "name": "a", "replay_url": "http://h/replay", "reason": "r"}, format="json").status_code == 403
    for path, body in [("sources/", {"source_id": "s", "content": "c", "reason": "r"}),
                       ("tickets/", {"ticket_id": "t", "reason": "r", **TICKET}),
                       ("agent-tokens/", {"label": "l", "reason": "r"})]:
        assert client_for(outsider).post(f"/api/v1/workspaces/{other.pk}/{path}", body,
                                         format="json").status_code == 404
    admin = make_user("admin-here", roles=["Workspace admin"], workspaces=[other])
    api = client_for(admin)
    for path, body in [("tickets/", {"ticket_id": "t", "reason": "r", "customer_name": "only a name"}),
                       ("agents/", {"name": "triage", "replay_url": "http://h/replay", "reason": "an in-process name"}),
                       ("agents/", {"name": "a", "replay_url": "ftp://h/replay", "reason": "r"}),
                       ("agents/", {"name": "a", "replay_url": "http://user:pw@h/replay", "reason": "r"}),
                       ("sources/", {"source_id": "bad\x00id", "content": "c", "reason": "r"})]:
        answer = api.post(f"/api/v1/workspaces/{other.pk}/{path}", body, format="json")
        assert answer.status_code == 400 and set(answer.json()["error"]) == {"code", "message", "details"}
    assert not (Workspace.objects.exclude(pk=other.pk).exists() or Source.objects.exists() or Ticket.objects.exists()
                or AgentRegistration.objects.exists() or AgentToken.objects.exists())


def test_the_command_line_onboards_too_and_its_token_records(make_user, capsys):
    make_user("cli-admin", roles=["Workspace admin"])
    call_command("onboard", "workspace", "--name", "desk-cli", "--user", "cli-admin", "--reason", "setup")
    call_command("onboard", "agent", "--workspace", "desk-cli", "--name", "faq_remote", "--replay-url",
                 "http://127.0.0.1:9/replay", "--user", "cli-admin", "--reason", "setup")
    capsys.readouterr()
    call_command("onboard", "token", "--workspace", "desk-cli", "--label", "cli", "--agent", "faq_remote",
                 "--user", "cli-admin", "--reason", "setup")
    key = capsys.readouterr().out.strip()
    recorder = APIClient()
    recorder.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    opened = recorder.post("/api/v1/recording/actions/", {"agent": "faq_remote", "payload": {"topic": "x"}},
                           format="json")
    assert opened.status_code == 201, opened.content
    with pytest.raises(SystemExit):
        call_command("onboard", "workspace", "--name", "desk-cli", "--user", "cli-admin", "--reason", "again")
