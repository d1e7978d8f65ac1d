"""The test database of one test process. Under pytest-xdist the first worker migrates a template
database for the whole run and every worker copies it (CREATE DATABASE ... TEMPLATE, under an advisory
lock): three workers each running every migration side by side cost 8 s of CPU apiece at the start of
every run, a copy well under one.

The template is named for the run (PYTEST_XDIST_TESTRUNUID), so a run never copies another's schema;
the first worker to finish drops it, and a run that was killed leaves one that the next run of the same
database name drops. Outside xdist, or with --reuse-db, the database is created and migrated as Django
does it."""
from __future__ import annotations

import os
import re

from django.core.management import call_command
from django.db import DatabaseError, connections


def create(owner, app, *, verbosity: int, keepdb: bool) -> str:
    """Create the process's test database as `owner` (an alias that may create databases), with `app`
    (the application's alias) reading the same database; returns its name."""
    target = owner.creation._get_test_db_name()
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    # Before migrating: a data migration that reads through the application's alias must see this database.
    app.settings_dict["NAME"] = target
    if not run or keepdb:
        return owner.creation.create_test_db(verbosity=verbosity, autoclobber=True, keepdb=keepdb, serialize=False)
    template = template_name(target, run)
    q = owner.ops.quote_name
    with owner._nodb_cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(hashtext(%s))", [template])
        try:
            if not _exists(cur, template):
                _drop_other_runs_templates(cur, template, q)
                _migrate(owner, app, template, verbosity)
            cur.execute(f"DROP DATABASE IF EXISTS {q(target)}")
            cur.execute(f"CREATE DATABASE {q(target)} TEMPLATE {q(template)}")
        finally:
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", [template])
    for connection in (owner, app):
        connection.close()
        connection.settings_dict["NAME"] = target
    call_command("createcachetable", database=owner.alias)
    owner.ensure_connection()
    return target


def drop_template(owner) -> None:
    """Drop the run's template. While another worker is still copying it the drop is refused and the
    template stays; the next run of the same database name drops it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return
    template = template_name(owner.creation._get_test_db_name(), run)
    with owner._nodb_cursor() as cur:
        try:
            cur.execute(f"DROP DATABASE IF EXISTS {owner.ops.quote_name(template)}")
        except DatabaseError:
            pass


def template_name(test_db: str, run: str) -> str:
    # Postgres names stop at 63 bytes.
    return f"{_stem(test_db)[:40]}_tpl_{run[:12]}"


def _stem(test_db: str) -> str:
    return re.sub(r"_gw\d+$", "", test_db)


def _exists(cur, name: str) -> bool:
    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
    return cur.fetchone() is not None


def _drop_other_runs_templates(cur, template: str, q) -> None:
    stem = template.rsplit("_tpl_", 1)[0]
    cur.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                [stem.replace("_", r"\_") + r"\_tpl\_%", template])
    for (name,) in cur.fetchall():
        try:
            cur.execute(f"DROP DATABASE IF EXISTS {q(name)}")
        except DatabaseError:
            pass  # in use: a run of its own is still going


def _migrate(owner, app, template: str, verbosity: int) -> None:
    test = owner.settings_dict["TEST"]
    saved = test.get("NAME")
    test["NAME"] = app.settings_dict["NAME"] = template
    try:
        owner.creation.create_test_db(verbosity=verbosity, autoclobber=True, keepdb=False, serialize=False)
    finally:
        test["NAME"] = saved
        # A database is copied only while nobody is connected to it.
        connections.close_all()
