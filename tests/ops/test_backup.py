"""`manage.py backup DIR` and `manage.py restore DIR`: a home restored from its backup verifies its
audit record, exports the same state for every workspace and resumes its open repair; a damaged backup
or a home that is not fresh is refused."""
from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from core.audit import checkpoints
from provenance.recording.services import desk_run
from tests.helpers import ROOT, worker_env
from tests.helpers import flag_and_repair, open_incident

pytestmark = pytest.mark.django_db(transaction=True)


RESTORED_HOME_CHECKS = """
import io, json
from django.core.management import call_command
from repairs.job import run_repair

def verify():
    try:
        call_command("verify_audit", stdout=io.StringIO())
    except SystemExit as exit_:
        return exit_.code
    return 0

def state(ws):
    out = io.StringIO()
    call_command("export_state", "--workspace", ws, "--json", stdout=out)
    return json.loads(out.getvalue())

before = verify()
from compensation.models import AuditEvent
restores = list(AuditEvent.objects.filter(action="backup.restored", workspace=None).values_list("data", flat=True))
states = {{ws: state(ws) for ws in {workspaces!r}}}
resumed = run_repair(incident_id={incident}).status
print(json.dumps({{"verified_before": before, "restores": restores, "states": states, "resumed": resumed, "verified_after": verify()}}))
"""


def _manage(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _state(workspace: str) -> dict:
    out = io.StringIO()
    call_command("export_state", "--workspace", workspace, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def fresh_home(tmp_path, second_falkordb_url):
    """Another home: its own database (on the same Postgres server), FalkorDB server, checkpoint log and
    anchor (empty: a new home has no record of any log); the same signing key and secret box key, as a
    restored deployment brings its keys from the secret store."""
    import psycopg

    db = settings.DATABASES["owner"]
    name = f"{db['NAME']}_restored"
    prefix, graph_url = settings.KINTSUGI_GRAPH_PREFIX, second_falkordb_url
    env = worker_env(name, FALKORDB_URL=graph_url, KINTSUGI_CACHE_PREFIX=f"{prefix}r",
                     KINTSUGI_AUDIT_CHECKPOINT_LOG=str(tmp_path / "new-home" / "checkpoints.jsonl"),
                     KINTSUGI_AUDIT_ANCHOR_LOG=str(tmp_path / "new-home-anchor" / "anchor.jsonl"),
                     KINTSUGI_REPAIR_HELPERS="0", CELERY_TASK_ALWAYS_EAGER="1")
    conninfo = dict(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname="postgres",
                    autocommit=True)

    def drop():
        with psycopg.connect(**conninfo) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        from provenance.graph.graph import Graph, _db

        for graph in _db(graph_url).list_graphs():
            if graph.startswith(prefix + ":"):
                Graph(graph, graph_url).delete()
    drop()
    yield env
    drop()


def test_a_backup_restores_into_a_fresh_home(tmp_path, fresh_home):
    desk_run(workspace="ops-bk-a")
    flag_and_repair("ops-bk-a")
    desk_run(workspace="ops-bk-b")
    waiting = open_incident("ops-bk-b")  # flagged, its repair not run yet
    checkpoints.flush()
    backup_dir = tmp_path / "backup"
    call_command("backup", str(backup_dir), stdout=io.StringIO())
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    assert {"postgres", "falkordb", "checkpoints"} <= set(manifest)
    names = {g for server in manifest["falkordb"].values() for g in server["graphs"]}
    prefix = settings.KINTSUGI_GRAPH_PREFIX
    assert {f"{prefix}:ops-bk-a", f"{prefix}:ops-bk-b"} <= names
    assert manifest["checkpoints"]["lines"] > 0

    old = os.umask(0o022)
    try:
        restored = _manage(fresh_home, "restore", str(backup_dir))
    finally:
        os.umask(old)
    assert restored.returncode == 0, restored.stderr
    assert "warning" not in restored.stderr  # the same secret box key: the replay secrets open
    new_log = Path(fresh_home["KINTSUGI_AUDIT_CHECKPOINT_LOG"])
    assert stat.S_IMODE(new_log.stat().st_mode) == 0o600
    # The restored home's own commands, in one process of its own: the record verifies, each workspace
    # exports the same state as here, the waiting repair resumes and the record still verifies after it.
    there = _manage(fresh_home, "shell", "-c", RESTORED_HOME_CHECKS.format(workspaces=["ops-bk-a", "ops-bk-b"],
                                                                            incident=waiting.pk))
    assert there.returncode == 0, there.stderr[-2000:]
    checks = json.loads(there.stdout.strip().splitlines()[-1])
    assert checks["verified_before"] == 0, checks
    # The restore is in the record: which backup, and every chain re-anchored under this home's key.
    [restore_event] = checks["restores"]
    assert restore_event["chains_reanchored"] >= 2 and restore_event["rows"] == manifest["postgres"]["rows"]
    assert checks["states"] == {ws: _state(ws) for ws in ("ops-bk-a", "ops-bk-b")}
    assert checks["resumed"] == "repaired" and checks["verified_after"] == 0, checks

    # Red: the same home again is not fresh; nothing in it is replaced.
    again = _manage(fresh_home, "restore", str(backup_dir))
    assert again.returncode == 2 and "fresh home" in again.stderr


def test_a_damaged_backup_is_refused_before_anything_is_restored(tmp_path, fresh_home):
    desk_run(workspace="ops-bk-c")
    backup_dir = tmp_path / "backup"
    call_command("backup", str(backup_dir), stdout=io.StringIO())
    dump = backup_dir / "postgres.dump"
    data = bytearray(dump.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dump.write_bytes(bytes(data))
    refused = _manage(fresh_home, "restore", str(backup_dir))
    assert refused.returncode == 2 and "damaged" in refused.stderr
    probe = _manage(fresh_home, "shell", "-c", "from provenance.models import Workspace; print(Workspace.objects.count())")
    assert probe.returncode != 0 or probe.stdout.strip().endswith("0")


def test_backup_refuses_a_directory_that_is_not_empty(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        call_command("backup", str(tmp_path), stdout=io.StringIO(), stderr=io.StringIO())
    assert exit_.value.code == 2
