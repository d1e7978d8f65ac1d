"""A backup holds no secret that works: agents' replay secrets are sealed with a key that is not in it,
and the replay still signs with them in the home that holds the key."""
from __future__ import annotations

import io
import json
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from compensation.backup import pg_tool, server_major
from provenance.models import AgentRegistration, Workspace
from provenance.onboarding import register_agent
from provenance.replay import ReplayFailed, _replay, remote_agents

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
