"""The migrations that take secrets out of the clear: replay secrets already stored are sealed."""
import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from core import secret_box
from core.db_roles import OWNER_ALIAS
from provenance.models import AgentRegistration

# Not a transactional test: the owner's connection runs the migrations inside the test's transaction
# (as in test_provisional_counter_migration).
pytestmark = pytest.mark.django_db(databases=["default", OWNER_ALIAS])

CLEAR = "krs_" + "x" * 43


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connections[OWNER_ALIAS])
    executor.migrate(targets)
    return executor


def _raw(sql: str, params=()) -> list:
    with connections[OWNER_ALIAS].cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def test_replay_secrets_stored_in_the_clear_are_sealed():
    leaves = MigrationExecutor(connections[OWNER_ALIAS]).loader.graph.leaf_nodes()
    before = [("provenance", "0011_provisional_action_counter")]
    try:
        executor = _migrate(before)
        old = executor.loader.project_state(before).apps
        ws = old.get_model("provenance", "Workspace").objects.using(OWNER_ALIAS).create(name="mig-sealed")
        reg = old.get_model("provenance", "AgentRegistration").objects.using(OWNER_ALIAS).create(
            workspace=ws, name="far", replay_url="http://127.0.0.1:9/", replay_secret=CLEAR)
        assert _raw("SELECT replay_secret FROM provenance_agentregistration WHERE id = %s", [reg.pk]) == [(CLEAR,)]
        _raw("SET CONSTRAINTS ALL IMMEDIATE")  # the new rows' checks now: the migration alters their tables
        _migrate([("provenance", "0012_sealed_replay_secrets")])
    finally:
        _migrate(leaves)
    [(stored,)] = _raw("SELECT replay_secret FROM provenance_agentregistration WHERE id = %s", [reg.pk])
    assert CLEAR not in stored and secret_box.open_sealed(stored) == CLEAR
    assert AgentRegistration.objects.using(OWNER_ALIAS).get(pk=reg.pk).replay_secret == CLEAR
