"""What the audit tests share: the database owner's own connection (for what the application role may
not do), running verify_audit / verify_report, and chains with a few signed rows."""
from __future__ import annotations

from types import SimpleNamespace

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection


def owner_connection() -> psycopg.Connection:
    """A connection to the test database as its owner (the superuser), outside Django."""
    d = settings.DATABASES["owner"]
    return psycopg.connect(dbname=connection.settings_dict["NAME"], host=d["HOST"] or d.get("OPTIONS", {}).get("host"),
                           port=d["PORT"] or 5432, user=d["USER"], password=d["PASSWORD"] or None, autocommit=True)


def behind_the_triggers_back(sql: str, params=()) -> None:
    """What the owner can do: switch triggers off for the session and change rows."""
    with owner_connection() as db:
        db.execute("SET session_replication_role = replica")
        db.execute(sql, params)


def run_command(capsys, *args) -> tuple[int, str]:
    try:
        call_command(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def signed_chains(*, a_rows: int = 10, b_rows: int = 6, system_rows: int = 3) -> SimpleNamespace:
    """Two workspaces' chains and the system chain, committed and signed."""
    from core import audit, checkpoints
    from provenance.models import Workspace

    a, b = Workspace.objects.create(name="audit-a"), Workspace.objects.create(name="audit-b")
    for ws, n in ((a, a_rows), (b, b_rows), (None, system_rows)):
        for i in range(n):
            audit.record(action="test.event", subject_type="test", subject_id=i, via="cli", reason=f"event {i}",
                         workspace=ws, data={"i": i})
    checkpoints.flush()
    return SimpleNamespace(a=a, b=b)
