"""The suite's own test database (tests.database): a template migrated once per run, copied by each
pytest-xdist worker; a template left by a killed run of the same database name is dropped, and nothing else."""
import pytest
from django.db import connections

from core.db_roles import OWNER_ALIAS
from tests import database

pytestmark = pytest.mark.django_db(databases=["default", OWNER_ALIAS])


def test_a_template_is_named_for_its_run_and_its_database_not_the_worker():
    assert database.template_name("test_test_gw0", "a1b2c3d4e5f6a7b8") == "test_test_tpl_a1b2c3d4e5f6"
    assert database.template_name("test_test_gw2", "a1b2c3d4e5f6a7b8") == "test_test_tpl_a1b2c3d4e5f6"
    assert len(database.template_name("t" * 80 + "_gw0", "a1b2c3d4e5f6")) <= 63


def test_a_killed_runs_template_is_dropped_and_other_databases_stay():
    owner = connections[OWNER_ALIAS]
    q = owner.ops.quote_name
    ours, stale, other = "kstest_tpl_ours", "kstest_tpl_killedrun", "kstestxtplxotherrun"
    with owner._nodb_cursor() as cur:
        for name in (stale, other):
            cur.execute(f"DROP DATABASE IF EXISTS {q(name)}")
            cur.execute(f"CREATE DATABASE {q(name)}")
        try:
            database._drop_other_runs_templates(cur, ours, q)
            cur.execute("SELECT datname FROM pg_database WHERE datname IN (%s, %s)", [stale, other])
            assert [r[0] for r in cur.fetchall()] == [other]
        finally:
            for name in (stale, other):
                cur.execute(f"DROP DATABASE IF EXISTS {q(name)}")
