"""A backup holds no secret that works: API token keys are stored as digests and recording token keys
as hashes (a dumped value does not log in), agents' replay secrets are sealed with a key that is not in
the backup, and the replay still signs with them in the home that holds the key."""
from __future__ import annotations

import io
import json
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from compensation.backup import pg_tool, server_major
import re

from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from provenance.access import tokens
from provenance.models import AgentRegistration, AgentToken, ApiTokenLease, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent, token_for_key
from provenance.recording.replay import ReplayFailed, _replay, remote_agents

pytestmark = pytest.mark.django_db(transaction=True)


def _raw_secret(pk: int) -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT replay_secret FROM provenance_agentregistration WHERE id = %s", [pk])
        return cur.fetchone()[0]


def _dump_text(out, table: str) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    tool = pg_tool("pg_restore", major=server_major(connection))
    return subprocess.run([str(tool), "-f", "-", "--data-only", "-t", table, str(out / manifest["postgres"]["file"])],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def agent():
    admin = get_user_model().objects.create_superuser("bs-root", "r@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="ops-bs")
    reg, created = register_agent(workspace=ws, name="far", replay="http://127.0.0.1:9/replay", actor=admin,
                                  reason="t", via="cli")
    assert created and reg.replay_secret.startswith("krs_")
    return reg


def test_replay_secrets_are_sealed_in_the_row_and_in_the_dump(agent, tmp_path):
    secret = agent.replay_secret
    stored = _raw_secret(agent.pk)
    assert secret not in stored and stored.startswith("gAAAAA")
    # What the application reads, and what the replay signs with, is the secret itself.
    assert AgentRegistration.objects.get(pk=agent.pk).replay_secret == secret
    assert remote_agents("ops-bs")["far"].replay_secret == secret

    out = tmp_path / "backup"
    call_command("backup", str(out), stdout=io.StringIO())
    raw = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert secret.encode() not in raw
    rows = _dump_text(out, "provenance_agentregistration")
    assert stored in rows and secret not in rows  # the row is there, sealed


def test_a_home_without_the_key_cannot_sign_with_a_sealed_secret(agent, tmp_path, settings):
    settings.KINTSUGI_SECRET_BOX_KEY = str(tmp_path / "another-home" / "secret-box.key")
    far = remote_agents("ops-bs")["far"]
    assert far.replay_secret == ""  # nothing else that reads the row fails
    with pytest.raises(ReplayFailed, match="cannot be opened"):
        _replay(far, rec=None, payload={})


def _status(key: str, scheme: str = "Token") -> int:
    # A person with no review role: 403 once logged in, 401 when the key logs no one in.
    return APIClient().get("/api/v1/review-items/", HTTP_AUTHORIZATION=f"{scheme} {key}").status_code


def test_api_token_keys_are_stored_as_digests_and_a_dumped_value_does_not_log_in(tmp_path):
    person = get_user_model().objects.create_user("bs-person", "p@example.com", "pass-1234-kintsugi")
    _, key = tokens.issue_api_token(user=person, actor=person, reason="t", via="cli")
    [stored] = Token.objects.filter(user=person).values_list("key", flat=True)
    assert stored != key and stored == tokens.api_key_digest(key)
    assert ApiTokenLease.objects.get(token_id=stored).prefix == key[:6]
    assert _status(key) == 403 and _status(key, "Bearer") == 403  # REST and the MCP clients' scheme

    out = tmp_path / "backup"
    call_command("backup", str(out), stdout=io.StringIO())
    rows = _dump_text(out, "authtoken_token")
    assert stored in rows and key not in rows
    assert key.encode() not in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    # Red: what the dump holds, presented as a key, logs no one in.
    assert _status(stored) == 401 and _status(stored, "Bearer") == 401
    assert tokens.api_token_user(stored) is None


def test_recording_token_keys_are_only_hashes_in_the_dump(agent, tmp_path):
    token, key = issue_agent_token(workspace=agent.workspace, label="t", actor=None, reason="t", via="cli")
    out = tmp_path / "backup"
    call_command("backup", str(out), stdout=io.StringIO())
    rows = _dump_text(out, "provenance_agenttoken")
    assert token.key_hash in rows and key not in rows
    assert token_for_key(key) is not None and token_for_key(token.key_hash) is None
    assert AgentToken.objects.count() == 1


def test_every_way_of_making_a_token_stores_a_digest_and_shows_the_key_once():
    person = get_user_model().objects.create_user("bs-made", "m@example.com", "pass-1234-kintsugi")
    made = Token.objects.create(user=person)  # DRF's own path (the admin's add form saves so)
    assert tokens.is_digest(made.key) and made.key == tokens.api_key_digest(made.plain_key)
    assert _status(made.plain_key) == 403 and _status(made.key) == 401

    # drf_create_token prints a key that works, as the operators' scripts read it; each call replaces
    # the token (a stored key cannot be shown again), so the earlier key stops working.
    printed = []
    for _ in range(2):
        out = io.StringIO()
        call_command("drf_create_token", "bs-made", stdout=out)
        printed.append(re.findall(r"[0-9a-f]{40}", out.getvalue())[-1])
    assert _status(printed[1]) == 403 and _status(printed[0]) == 401 and _status(made.plain_key) == 401
    assert Token.objects.filter(user=person).values_list("key", flat=True)[0] == tokens.api_key_digest(printed[1])
