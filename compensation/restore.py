"""Restore a backup (compensation.backup) into a fresh home: this process's database, FalkorDB servers
and checkpoint log, all empty."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings
from django.db import connection, connections, transaction

from compensation.backup import (MANIFEST, BackupError, _owner, _run, _servers, _sha256, pg_tool, private_dir,
                                 server_major, write_private)
from compensation.backup_check import target_of
from core.audit import checkpoints, keys, trail, verification
from core import secret_box
from core.vocabulary import AuditAction, Via


def _read_manifest(directory: Path) -> dict:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{directory} holds no readable {MANIFEST}: {exc}") from None
    for part in ("postgres", "falkordb", "checkpoints"):
        if part not in manifest:
            raise BackupError(f"the manifest names no {part}")
    for path, want in [(manifest["postgres"]["file"], manifest["postgres"]["sha256"]),
                       (manifest["checkpoints"]["file"], manifest["checkpoints"]["sha256"])] + [
            (p["file"], p["sha256"]) for server in manifest["falkordb"].values()
            for entry in server["graphs"].values() for p in entry.values()]:
        if _sha256(directory / path) != want:
            raise BackupError(f"{path} does not match its checksum in the manifest; the backup is damaged")
    return manifest


def _ensure_empty_database() -> None:
    """Create this home's database if it does not exist; refuse one that already holds tables."""
    conn = _owner()
    db = conn.settings_dict
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            if cur.fetchone()[0]:
                raise BackupError(f"database {db['NAME']!r} already holds tables; restore into a fresh home")
        return
    except BackupError:
        raise
    except Exception:  # noqa: BLE001 - the database does not exist yet: create it from the maintenance db
        conn.close()
    import psycopg

    # The server the home is configured for, socket directory included (Django's own reading of it).
    params = conn.get_connection_params()
    args = {k: params[k] for k in ("host", "port", "user", "password") if params.get(k)}
    with psycopg.connect(**args, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db["NAME"]}"')


def _restore_postgres(directory: Path, manifest: dict) -> None:
    from core.db_roles import ensure_app_role

    _ensure_empty_database()
    conn = _owner()
    tool = pg_tool("pg_restore", major=max(server_major(conn), manifest["postgres"]["server_major"]))
    target = target_of(conn)
    _run([str(tool), "--no-owner", "--no-privileges", "--exit-on-error", "-d", target.dbname,
          str(directory / manifest["postgres"]["file"])], target.env())
    connections.close_all()
    ensure_app_role(using=conn.alias, verbosity=0)  # the application role's grants, as migrate gives them


def _target_url(key: str, servers: dict[str, str]) -> str:
    if key in servers:
        return servers[key]
    if len(servers) == 1:
        return next(iter(servers.values()))  # one server then, one server now: the same role
    raise BackupError(f"the backup holds graphs of FalkorDB server {key}, which this home does not configure "
                      f"(KINTSUGI_FALKORDB_URLS lists {', '.join(servers)})")


def _restore_graphs(directory: Path, manifest: dict) -> int:
    from provenance.graph.graph import Graph, _connection

    # A graph's name is inside its serialised value: RESTORE under another name would leave a key whose
    # graph calls itself something else, so the home keeps the backup's prefix.
    if manifest["graph_prefix"] != settings.KINTSUGI_GRAPH_PREFIX:
        raise BackupError(f"the backup's graphs are under KINTSUGI_GRAPH_PREFIX={manifest['graph_prefix']!r}; "
                          f"restore with the same prefix (this home has {settings.KINTSUGI_GRAPH_PREFIX!r})")
    servers, restored, plan = _servers(), 0, []
    for key, server in manifest["falkordb"].items():
        url = _target_url(key, servers)
        for name, entry in server["graphs"].items():
            if Graph(name, url).exists():
                raise BackupError(f"graph {name} already exists on {key}; restore into a fresh home")
            plan.append((url, name, entry))
    for url, target, entry in plan:
        conn = _connection(url)
        if "graph" in entry:
            conn.restore(target, 0, (directory / entry["graph"]["file"]).read_bytes(), replace=False)
            restored += 1
        if "stamp" in entry:
            conn.restore(f"~stamp:{target}", 0, (directory / entry["stamp"]["file"]).read_bytes(), replace=True)
        Graph(target, url).mark_changed()  # a fresh epoch: no process trusts a mirror of an older copy
    return restored


def _restore_checkpoints(directory: Path, manifest: dict) -> int:
    """Carry the signed checkpoint log over (0600) and re-anchor each chain: verify it against the
    backup's checkpoint with the backup's key, then sign its head again with this home's key, for this
    database; appending those lines records the log's end in this home's anchor (core.audit.anchor)."""
    source = directory / manifest["checkpoints"]["file"]
    log = checkpoints.log_path()
    if log.exists() and log.stat().st_size:
        raise BackupError(f"the checkpoint log {log} is not empty; restore into a fresh home")
    private_dir(log.parent)
    write_private(log, source.read_bytes())
    old_db, new_db = manifest["checkpoints"]["database"], checkpoints.database_name()
    key = keys.load_public_key(directory / manifest["checkpoints"]["public_key"])
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    carried = []
    for label, cp in checkpoints.latest(database=old_db, path=source).items():
        m = re.fullmatch(r"workspace:(\d+)", label)
        ws = int(m.group(1)) if m else None
        status = verification.verify_chain(workspace=ws, checkpoint=cp, public_key=key)
        if status.broken is not None:
            raise BackupError(f"audit chain {label} does not verify against the backup's checkpoint: "
                              f"{status.broken}")
        carried.append(checkpoints.Checkpoint(database=new_db, chain=cp.chain, workspace=cp.workspace, seq=cp.seq,
                                              hash=cp.hash, at=now, key=keys.signing_fingerprint(),
                                              counts=cp.counts))
    checkpoints._append(carried)  # signs each line, chains it, and anchors the log's new end
    return len(carried)


def _audit_restore(directory: Path, manifest: dict, carried: int) -> None:
    """The restore itself, in the system chain (its head is signed like any other)."""
    with transaction.atomic():
        trail.record(action=AuditAction.BACKUP_RESTORED, subject_type="backup", subject_id=manifest["created_at"],
                     via=Via.CLI, reason=f"restored from the backup of {manifest['created_at']}", workspace=None,
                     data={"from_database": manifest["postgres"].get("database"), "chains_reanchored": carried,
                           "rows": manifest["postgres"].get("rows", {}),
                           "manifest_sha256": _sha256(directory / MANIFEST)})
    checkpoints.flush()


def _secret_box_problem(manifest: dict) -> str | None:
    """Why this home cannot open the replay secrets in the restored rows, or None."""
    wanted, have = manifest.get("secret_box_key"), secret_box.fingerprint(create=False)
    if wanted is None or wanted == have:
        return None
    where = secret_box.key_path()
    if have is None:
        return (f"no key at {where} (KINTSUGI_SECRET_BOX_KEY): copy the old home's key there (fingerprint "
                f"{wanted}) or agents' replay secrets stay sealed until rotated")
    return (f"the key at {where} is not the one the replay secrets were sealed with (fingerprint {wanted}): "
            f"bring that key, or rotate the agents' replay secrets")


def restore(directory: Path) -> dict:
    """Restore the backup in `directory` into this (empty) home; returns what was restored."""
    directory = Path(directory)
    manifest = _read_manifest(directory)
    _restore_postgres(directory, manifest)
    graphs = _restore_graphs(directory, manifest)
    carried = _restore_checkpoints(directory, manifest)
    _audit_restore(directory, manifest, carried)
    connection.close()
    return {"database": _owner().settings_dict["NAME"], "graphs": graphs, "checkpoints_carried": carried,
            "secret_box_problem": _secret_box_problem(manifest)}
