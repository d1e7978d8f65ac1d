"""Tokens an operator can trust (expiry, rotation, last use), sessions that expire when idle, and a
Content-Security-Policy on the admin, the case pages and the API docs."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from compensation.models import AuditEvent
from kintsugi_site import mcp_server
from provenance.access import tokens
from provenance.models import AgentToken, ApiTokenLease, Workspace
from provenance.access.onboarding import forget_token
from tests.helpers import run_command
from tests.helpers import create_user

pytestmark = pytest.mark.django_db


def _get(key: str, path: str = "/api/v1/workspaces/", scheme: str = "Token") -> int:
    return APIClient().get(path, HTTP_AUTHORIZATION=f"{scheme} {key}").status_code


@pytest.mark.django_db(transaction=True)  # the MCP verifier closes its connections, as in its own thread
def test_an_api_token_expires_on_every_surface():
    user = create_user("tok-expiry", staff=False)
    token, key = tokens.issue_api_token(user=user, expires_in_days=1, actor=None, reason="r", via="cli")
    assert _get(key) == 200 and _get(key, scheme="Bearer") == 200 and mcp_server._user_for_token(key) == user
    ApiTokenLease.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _get(key) == 401 and _get(key, scheme="Bearer") == 401
    body = APIClient().get("/api/v1/workspaces/", HTTP_AUTHORIZATION=f"Token {key}").json()
    assert "expired" in body["error"]["message"]
    assert mcp_server._user_for_token(key) is None


def test_rotating_an_api_token_refuses_the_old_key_and_is_audited(capsys):
    user = create_user("tok-rotate", staff=False)
    create_user("tok-operator", staff=False)
    code, out = run_command(capsys, "api_token", "issue", "tok-rotate", "--user", "tok-operator", "--reason", "new",
                            "--json")
    first = json.loads(out)["key"]
    code, out = run_command(capsys, "api_token", "issue", "tok-rotate", "--expires-in", "30", "--user", "tok-operator",
                            "--reason", "rotate", "--json")
    second = json.loads(out)
    assert code == 0 and second["expires_at"]
    assert _get(first) == 401 and _get(second["key"]) == 200
    assert AuditEvent.objects.filter(action="api_token.rotated", workspace__isnull=True, data__user=user.username).exists()
    with pytest.raises(PermissionError):  # someone else's token, outside the command line
        tokens.issue_api_token(user=user, actor=create_user("tok-other", staff=False), reason="x", via="api")
    code, out = run_command(capsys, "api_token", "list")
    assert "tok-rotate" in out and second["key"] not in out  # the key is never shown again


def test_last_use_is_written_at_most_once_a_minute(django_assert_max_num_queries):
    user = create_user("tok-use", staff=False)
    token, key = tokens.issue_api_token(user=user, actor=None, reason="r", via="cli")
    assert ApiTokenLease.objects.get(pk=token.pk).last_used_at is None
    _get(key)
    first = ApiTokenLease.objects.get(pk=token.pk).last_used_at
    assert first is not None
    _get(key)
    assert ApiTokenLease.objects.get(pk=token.pk).last_used_at == first  # within the minute: no write
    ApiTokenLease.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    _get(key)
    assert ApiTokenLease.objects.get(pk=token.pk).last_used_at > first - timedelta(seconds=1)


def test_a_recording_token_expires_and_rotates(capsys):
    create_user("tok-admin", staff=False, is_superuser=True)
    Workspace.objects.create(name="tok-ws")
    common = ("--workspace", "tok-ws", "--user", "tok-admin", "--reason", "agents")
    code, out = run_command(capsys, "onboard", "token", *common, "--label", "desk", "--expires-in", "7", "--json")
    issued = json.loads(out)
    assert code == 0 and issued["expires_at"]
    recording = "/api/v1/recording/actions/"
    assert APIClient().post(recording, {}, format="json", HTTP_AUTHORIZATION=f"Bearer {issued['key']}").status_code == 400
    assert AgentToken.objects.get(pk=issued["id"]).last_used_at is not None
    code, out = run_command(capsys, "onboard", "rotate-token", *common, "--token-id", str(issued["id"]), "--json")
    rotated = json.loads(out)
    assert code == 0 and rotated["replaces"] == issued["id"]
    assert APIClient().post(recording, {}, format="json", HTTP_AUTHORIZATION=f"Bearer {issued['key']}").status_code == 401
    assert APIClient().post(recording, {}, format="json", HTTP_AUTHORIZATION=f"Bearer {rotated['key']}").status_code == 400
    AgentToken.objects.filter(pk=rotated["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    # A process holds a token it has just seen for TOKEN_CACHE_SECONDS; this one forgets it at once, as
    # every process has after that long.
    forget_token(AgentToken.objects.get(pk=rotated["id"]))
    assert APIClient().post(recording, {}, format="json", HTTP_AUTHORIZATION=f"Bearer {rotated['key']}").status_code == 401
    code, out = run_command(capsys, "onboard", "token", *common, "--label", "x", "--expires-in", "0")
    assert code == 2 and "expires-in" in out


def test_sessions_expire_after_eight_idle_hours_and_requests_extend_them_once_a_minute():
    from kintsugi_site.session_touch import TOUCH_KEY

    assert settings.SESSION_COOKIE_AGE == 8 * 60 * 60 and not settings.SESSION_SAVE_EVERY_REQUEST
    client = Client()
    client.force_login(create_user("tok-session", is_superuser=True))
    # Within the minute of the login, a request writes nothing: no new cookie, no save.
    response = client.get("/admin/")
    assert response.status_code == 200 and "sessionid" not in response.cookies
    # A minute later, the next request renews it.
    session = client.session
    session[TOUCH_KEY] = int(session[TOUCH_KEY]) - 61
    session.save()
    assert client.get("/admin/").cookies["sessionid"]["max-age"] == 8 * 60 * 60
    # A page that never reads the session (anonymous) leaves it alone.
    assert "sessionid" not in Client().get("/healthz").cookies


@pytest.mark.parametrize("path", ["/admin/login/", "/admin/", "/admin/compensation/compensationitem/cases/",
                                  "/api/v1/docs/", "/api/v1/redoc/"])
def test_every_page_carries_a_content_security_policy(path):
    client = Client()
    if path != "/admin/login/":
        client.force_login(create_user("tok-csp", is_superuser=True))
    response = client.get(path)
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert "object-src 'self'" in policy and "frame-ancestors 'none'" in policy
    script_src = policy.split("script-src", 1)[1].split(";", 1)[0]
    assert "'self'" in script_src and "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    html = response.content.decode()
    # Every inline script carries the page's nonce (Swagger UI's start-up script is a file of its own).
    inline = [tag for tag in html.split("<script")[1:] if "src=" not in tag.split(">", 1)[0]
              and "application/json" not in tag.split(">", 1)[0]]
    if inline:
        nonce = script_src.split("'nonce-", 1)[1].split("'", 1)[0]
        assert all(f'nonce="{nonce}"' in tag.split(">", 1)[0] for tag in inline), path
    if path.endswith("/cases/"):
        assert inline, "the cases page's keyboard script is expected inline, with its nonce"
