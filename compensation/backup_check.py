"""That a backup holds the application's own database, and all of it.

Where pg_dump connects is read from the application's live connection (host or socket directory, port,
database, user), never rebuilt from settings: the embedded server listens on a Unix socket named only in
the connection's options, and a rebuilt "127.0.0.1:5432" reaches whatever other server listens there.

Two checks then make a wrong or short dump fail loudly instead of passing for a backup:
- the connection pg_dump's snapshot is taken on must be the application's database: same server (its
  start time, to the microsecond) and same database (its oid);
- the main tables are counted inside that snapshot, pg_dump dumps the same snapshot (--snapshot), and the
  dump file is read back with pg_restore: each table's rows in the file must equal the count."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


class BackupError(RuntimeError):
    pass


# The tables whose rows a backup must hold, by the names the manifest gives their counts.
COUNTED = {"workspaces": "provenance.Workspace", "tickets": "provenance.Ticket", "sources": "provenance.Source",
           "incidents": "repairs.Incident", "compensation_items": "compensation.CompensationItem",
           "ledger": "provenance.LedgerEntry", "outbox": "provenance.OutboxEmail",
           "audit_events": "compensation.AuditEvent", "agent_registrations": "provenance.AgentRegistration",
           "users": "auth.User"}

IDENTITY = ("SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, d.oid::bigint, "
            "current_database() "
            "FROM pg_database d WHERE d.datname = current_database()")


@dataclass(frozen=True)
class Target:
    """Where a connection is: libpq's own reading of it (a socket directory is a host here)."""
    host: str
    port: int
    dbname: str
    user: str
    password: str

    def env(self) -> dict:
        env = {**os.environ, "PGHOST": self.host, "PGPORT": str(self.port), "PGUSER": self.user,
               "PGDATABASE": self.dbname}
        env.pop("PGPASSWORD", None)
        if self.password:
            env["PGPASSWORD"] = self.password
        return env

    def connect(self):
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, dbname=self.dbname, user=self.user,
                               password=self.password or None)


def target_of(conn, *, login: dict | None = None) -> Target:
    """The server and database Django's `conn` is connected to, as libpq resolved them; logged in as
    `login` (a DATABASES entry: USER, PASSWORD) when given, else as `conn` is."""
    conn.ensure_connection()
    info = conn.connection.info
    user, password = (login["USER"], login.get("PASSWORD") or "") if login else (info.user, info.password or "")
    return Target(host=info.host, port=info.port, dbname=info.dbname, user=user, password=password)


def identity(cursor) -> tuple:
    cursor.execute(IDENTITY)
    return tuple(cursor.fetchone())


def tables() -> dict[str, str]:
    from django.apps import apps

    return {name: apps.get_model(*label.split("."))._meta.db_table for name, label in COUNTED.items()}


class Snapshot:
    """A read-only REPEATABLE READ transaction on `target` whose snapshot pg_dump imports: the counts
    taken in it are the rows the dump holds. Open until closed (pg_dump needs it alive)."""

    def __init__(self, target: Target, *, expect: tuple):
        self.conn = target.connect()
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_export_snapshot()")
            self.id = cur.fetchone()[0]
            found = identity(cur)
        if found != tuple(expect):
            self.close()
            raise BackupError(f"the dump would come from database {found[2]!r}, which is not the application's "
                              f"{expect[2]!r} on the server it uses: refusing to back up another database")

    def counts(self) -> dict[str, int]:
        out = {}
        with self.conn.cursor() as cur:
            for name, table in tables().items():
                cur.execute(f'SELECT count(*) FROM "{table}"')
                out[name] = cur.fetchone()[0]
        return out

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


def rows_in_dump(pg_restore: Path, dump: Path, wanted: dict[str, str]) -> dict[str, int]:
    """Rows of each table (name -> table) in a custom-format dump, read back with pg_restore; a table
    the dump has no data section for is missing from the answer."""
    by_table = {table: name for name, table in wanted.items()}
    cmd = [str(pg_restore), "-f", "-", "--data-only"] + [a for t in wanted.values() for a in ("-t", t)] + [str(dump)]
    found: dict[str, int] = {}
    current = None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        for line in proc.stdout:
            if current is None:
                if line.startswith(b"COPY "):
                    table = line.split(b" ", 2)[1].decode().rsplit(".", 1)[-1].strip('"')
                    if table in by_table:
                        current = by_table[table]
                        found[current] = 0
            elif line == b"\\.\n":
                current = None
            else:
                found[current] += 1  # COPY text escapes newlines in values: one line, one row
        err = proc.stderr.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        raise BackupError(f"pg_restore cannot read the dump back: {err.splitlines()[-1:] or proc.returncode}")
    return found


def check_dump(pg_restore: Path, dump: Path, counts: dict[str, int]) -> dict[str, int]:
    """Refuse a dump whose tables do not hold the rows counted in the application's database."""
    wanted = {name: table for name, table in tables().items() if name in counts}
    found = rows_in_dump(pg_restore, dump, wanted)
    wrong = [f"{name}: {found[name] if name in found else 'no table'} in the dump, {counts[name]} in the database"
             for name in wanted if found.get(name) != counts[name]]
    if wrong:
        raise BackupError(f"the dump {dump} does not hold the application's database ({'; '.join(wrong)}); "
                          f"this backup is not usable")
    return found
