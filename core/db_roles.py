"""Two database roles on one database: the owner, who migrates, and the application's login role,
which runs every request, worker and command.

The owner creates the tables; the application role gets ordinary DML on them, narrowed twice:
- the audit table: only SELECT and INSERT. It can append to the record and read it, never UPDATE,
  DELETE or TRUNCATE it, whatever the code running as it does. The triggers on the table are a second
  line behind these privileges (a table owner can drop triggers, which is what the checkpoints are for).
- the tables that hold the record of money and incidents (workspaces, incidents, compensation items,
  ledger, outbox, tickets; PROTECTED_TABLES): no DELETE and no TRUNCATE. Nothing the application does
  removes such a row: incidents close, items are rejected or cancelled, money is reversed by a new
  ledger row. The one path that must remove rows is a desk re-run (provenance.recording.services.desk_run),
  which replaces a workspace's tickets: it calls `kintsugi_replace_desk_tickets(workspace_id)`, a
  SECURITY DEFINER function owned by the owner that deletes that one workspace's tickets and nothing
  else (no TRUNCATE, no cascade into items or incidents, one workspace per call). A function rather
  than the owner's alias, because the deletion must commit or roll back with the desk run's own
  transaction on the application's connection. Emptying the database (`flush`: the test runner, a
  developer's reset) runs as the owner alias; so do the benchmarks' clean-ups.

Settings: the `owner` alias is the configured owner URL; `default` is the same database as the
application role (kintsugi_site.settings.base builds both). `ensure_app_role` is run by `migrate`
(post_migrate, on the owner alias) and is idempotent.
"""
from __future__ import annotations

import copy
from urllib.parse import unquote

OWNER_ALIAS = "owner"
APP_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE, TRUNCATE"
SEQUENCE_PRIVILEGES = "USAGE, SELECT, UPDATE"


def app_alias_settings(owner: dict, *, role: str, password: str) -> dict:
    """The `default` alias: the owner's database, host and options, logged in as `role`."""
    app = copy.deepcopy(owner)
    app["USER"], app["PASSWORD"] = role, password
    return app


def append_only_tables() -> list[str]:
    from core.audit.event import AuditEvent

    return [AuditEvent._meta.db_table]


PROTECTED_MODELS = ("provenance.Workspace", "repairs.Incident", "compensation.CompensationItem",
                    "provenance.LedgerEntry", "provenance.OutboxEmail", "provenance.Ticket")


def protected_tables() -> list[str]:
    """The record of money and incidents: the application role may not DELETE from or TRUNCATE them."""
    from django.apps import apps

    # Named by label: the models live in the layers above core.
    return [apps.get_model(*label.split("."))._meta.db_table for label in PROTECTED_MODELS]


REPLACE_TICKETS = "kintsugi_replace_desk_tickets"


def _replace_tickets_function(cur, *, schema: str, role: str, q) -> None:
    from django.apps import apps

    table = q(apps.get_model("provenance", "Ticket")._meta.db_table)
    cur.execute(f"""
        CREATE OR REPLACE FUNCTION {schema}.{REPLACE_TICKETS}(ws bigint) RETURNS integer
        LANGUAGE sql SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
            WITH gone AS (DELETE FROM {table} WHERE workspace_id = ws RETURNING 1) SELECT count(*)::integer FROM gone
        $$""")
    cur.execute(f"REVOKE ALL ON FUNCTION {schema}.{REPLACE_TICKETS}(bigint) FROM PUBLIC")
    cur.execute(f"GRANT EXECUTE ON FUNCTION {schema}.{REPLACE_TICKETS}(bigint) TO {q(role)}")


def prepare_default_privileges(*, using: str = OWNER_ALIAS) -> None:
    """Before migrating: the role exists and receives grants on tables as migrations create them, so a
    data migration that reads through the default alias sees them (post_migrate then narrows the audit
    table's grants again)."""
    ensure_app_role(using=using, verbosity=0)


def split_roles() -> bool:
    """True when `default` logs in as a role other than the owner's (the normal configuration)."""
    from django.conf import settings

    dbs = settings.DATABASES
    return OWNER_ALIAS in dbs and dbs["default"].get("USER") != dbs[OWNER_ALIAS].get("USER")


def _create_role(connection, cur, *, role: str, password: str) -> None:
    """Create the login role unless it exists. Roles belong to the whole cluster: two processes migrating
    two databases at once (parallel test workers) may both find it missing, and the second CREATE then
    fails; a role that exists once that error is caught is what was asked for."""
    from django.db import DatabaseError, transaction

    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    if cur.fetchone() is not None:
        return
    try:
        with transaction.atomic(using=connection.alias):
            cur.execute(f"CREATE ROLE {connection.ops.quote_name(role)} LOGIN" + (" PASSWORD %s" if password else ""),
                        [password] if password else None)
    except DatabaseError:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cur.fetchone() is None:
            raise


def ensure_app_role(*, using: str = OWNER_ALIAS, verbosity: int = 1) -> None:
    """As the owner: create the application role if missing (password-less unless
    KINTSUGI_DB_APP_PASSWORD is set: the embedded and test servers trust local connections), grant it
    DML on every table and sequence (and on tables later migrations create), then take UPDATE, DELETE
    and TRUNCATE on the append-only tables away again."""
    from django.conf import settings
    from django.db import connections

    if using != OWNER_ALIAS or not split_roles():
        return
    connection = connections[using]
    q = connection.ops.quote_name
    role, password = settings.DATABASES["default"]["USER"], settings.DATABASES["default"].get("PASSWORD") or ""
    with connection.cursor() as cur:
        _create_role(connection, cur, role=role, password=password)
        cur.execute("SELECT current_schema()")
        schema = q(cur.fetchone()[0])
        cur.execute(f"GRANT CONNECT ON DATABASE {q(connection.settings_dict['NAME'])} TO {q(role)}")
        cur.execute(f"GRANT USAGE ON SCHEMA {schema} TO {q(role)}")
        cur.execute(f"GRANT {APP_PRIVILEGES} ON ALL TABLES IN SCHEMA {schema} TO {q(role)}")
        cur.execute(f"GRANT {SEQUENCE_PRIVILEGES} ON ALL SEQUENCES IN SCHEMA {schema} TO {q(role)}")
        cur.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT {APP_PRIVILEGES} ON TABLES TO {q(role)}")
        cur.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT {SEQUENCE_PRIVILEGES} ON SEQUENCES TO {q(role)}")
        for table in append_only_tables():
            cur.execute("SELECT to_regclass(%s)", [table])
            if cur.fetchone()[0] is None:  # before the first migration that creates it
                continue
            cur.execute(f"REVOKE UPDATE, DELETE, TRUNCATE ON {q(table)} FROM {q(role)}, PUBLIC")
            cur.execute(f"GRANT SELECT, INSERT ON {q(table)} TO {q(role)}")
        present = []
        for table in protected_tables():
            cur.execute("SELECT to_regclass(%s)", [table])
            if cur.fetchone()[0] is not None:
                present.append(table)
                cur.execute(f"REVOKE DELETE, TRUNCATE ON {q(table)} FROM {q(role)}, PUBLIC")
        if len(present) == len(protected_tables()):
            _replace_tickets_function(cur, schema=schema, role=role, q=q)
    if verbosity >= 2:
        print(f"  database role {role!r}: DML granted; {', '.join(append_only_tables())} append-only; "
              f"no DELETE or TRUNCATE on {', '.join(protected_tables())}")


def databases(*, env, owner_url: str, app_url: str, derive_app_role: bool = True) -> dict:
    """DATABASES for both configurations. Locally (tests, the demo: `derive_app_role`) `app_url` is the
    owner's and the application role, KINTSUGI_DB_APP_ROLE, logs in to the same database beside it.
    In production `app_url` is the application role's own and `owner_url` (only needed to migrate) the
    owner's."""
    if derive_app_role:
        owner = env.db_url_config(owner_url or app_url)
        app = app_alias_settings(owner, role=env("KINTSUGI_DB_APP_ROLE", default="kintsugi_app"),
                                 password=env("KINTSUGI_DB_APP_PASSWORD", default=""))
    else:
        owner, app = (env.db_url_config(owner_url) if owner_url else None), env.db_url_config(app_url)
    dbs = {"default": app, **({OWNER_ALIAS: owner} if owner else {})}
    for alias in dbs.values():
        alias["ENGINE"] = "django.db.backends.postgresql"
        _socket_in_host(alias)
    # Under ASGI each concurrent request runs its sync view in a thread of its own, with a connection of
    # its own: a hundred agents recording at once would open a hundred connections per web worker. A
    # pool (psycopg_pool, Django's `pool` option) bounds them; requests beyond it wait for a connection.
    pool = env.int("KINTSUGI_DB_POOL_MAX_SIZE", default=0)
    if pool:
        app.setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": pool,
                                                 "timeout": env.int("KINTSUGI_DB_POOL_TIMEOUT", default=30)}
        app["CONN_MAX_AGE"] = 0
    return dbs


def _socket_in_host(alias: dict) -> None:
    """A server on a unix socket (the embedded one) has its directory in HOST, as a server on TCP has its
    address there: URLs give the directory percent-encoded as the host (postgresql://user@%2Fdir/db,
    which django-environ leaves encoded) or as `?host=/dir` (which it puts in OPTIONS). Whatever reads
    HOST (backups, restores, a worker's URL) then reaches either server the same way."""
    options = alias.get("OPTIONS") or {}
    host = unquote(alias.get("HOST") or "") or options.pop("host", "")
    alias["HOST"] = host
