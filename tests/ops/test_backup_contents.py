"""What `manage.py backup DIR` writes: the application's own database (checked row by row against the
dump it wrote), private files whatever the umask, and no secret that works: sealed replay secrets and
hashed token keys."""
from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command

from compensation import backup as backup_module
from compensation.backup import pg_tool
from compensation.backup import server_major as _server_major
from compensation.backup_check import BackupError, Target, check_dump, rows_in_dump, tables
from provenance.models import Ticket
from provenance.recording.services import desk_run
from tests.helpers import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def _admin_conninfo() -> dict:
    db = settings.DATABASES["owner"]
    return dict(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname="postgres",
                autocommit=True)


@pytest.fixture
def other_database():
    """Another, empty database on the machine's Postgres: what a backup that guessed its server reached."""
    db = settings.DATABASES["owner"]
    name = f"{db['NAME']}_other"
    with psycopg.connect(**_admin_conninfo()) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield Target(host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 5432), dbname=name, user=db["USER"],
                 password=db.get("PASSWORD") or "")
    with psycopg.connect(**_admin_conninfo()) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_major() -> int:
    from django.db import connection

    return _server_major(connection)


def _pg_restore():
    return pg_tool("pg_restore", major=server_major())


def test_the_dump_holds_the_rows_the_manifest_counts(tmp_path):
    desk_run(workspace="ops-bc-a")
    out = tmp_path / "backup"
    call_command("backup", str(out), stdout=io.StringIO())
    manifest = json.loads((out / "manifest.json").read_text())
    rows = manifest["postgres"]["rows"]
    assert rows["tickets"] == Ticket.objects.count() > 0
    assert rows["workspaces"] >= 1 and set(rows) >= {"incidents", "compensation_items", "audit_events", "ledger"}
    # Read back as the operators' drill reads it: pg_restore's data of the ticket table.
    found = rows_in_dump(_pg_restore(), out / manifest["postgres"]["file"], tables())
    assert found == rows


def test_a_dump_of_another_database_is_refused(tmp_path, other_database, monkeypatch):
    desk_run(workspace="ops-bc-b")
    tickets = Ticket.objects.count()
    # The dump of that other, empty database, as pg_dump wrote it: not the application's rows.
    dump = tmp_path / "other.dump"
    subprocess.run([str(pg_tool("pg_dump", major=server_major())), "--format=custom", "-f", str(dump),
                    other_database.dbname], env=other_database.env(), check=True, capture_output=True)
    counts = {name: 0 for name in tables()} | {"tickets": tickets}
    with pytest.raises(BackupError, match=rf"tickets: no table in the dump, {tickets} in the database"):
        check_dump(_pg_restore(), dump, counts)

    # Red, end to end: a backup pointed at that database (the old guess at a server) exits 2, loudly,
    # and leaves no manifest that would pass for a backup.
    monkeypatch.setattr(backup_module, "target_of", lambda conn, login=None: other_database)
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("backup", str(tmp_path / "wrong"), stdout=io.StringIO(), stderr=err)
    assert exit_.value.code == 2
    assert "refusing to back up another database" in err.getvalue()
    assert not (tmp_path / "wrong" / "manifest.json").exists()


def test_backup_files_are_private_whatever_the_umask(tmp_path):
    desk_run(workspace="ops-bc-c")
    out = tmp_path / "backup"
    old = os.umask(0)
    try:
        call_command("backup", str(out), stdout=io.StringIO())
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "postgres.dump", "checkpoints.jsonl", "signing-key.pub.pem"}
    assert any(p.suffix == ".graph" for p in files)
    assert {p.relative_to(out).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in files
            if stat.S_IMODE(p.stat().st_mode) != 0o600} == {}
    assert [p for p in out.rglob("*") if p.is_dir() and stat.S_IMODE(p.stat().st_mode) != 0o700] == []


def test_a_backup_over_the_servers_socket_dumps_that_server(tmp_path):
    """DATABASE_URL naming a Unix socket directory (as the embedded server's does): pg_dump goes
    through that socket, and the dump holds the application's tickets."""
    db = settings.DATABASES["owner"]
    # The tests' own server: the embedded one names its socket directory as HOST; one reached over TCP
    # (CI's) has its socket in the Debian default (another server's socket there would be another server).
    socket_dir = db["HOST"] if db["HOST"].startswith("/") else "/var/run/postgresql"
    if not os.path.exists(os.path.join(socket_dir, f".s.PGSQL.{db['PORT'] or 5432}")):
        pytest.skip(f"the tests' Postgres has no socket in {socket_dir}")
    desk_run(workspace="ops-bc-d")
    env = worker_env(db["NAME"], DATABASE_URL=f"postgresql://{db['USER']}@/{db['NAME']}?host={socket_dir}",
                     CELERY_TASK_ALWAYS_EAGER="1")
    out = tmp_path / "backup"
    done = subprocess.run([sys.executable, "manage.py", "backup", str(out), "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["postgres"]["rows"]["tickets"] == Ticket.objects.count() > 0
