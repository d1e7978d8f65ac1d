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


def test_api_token_keys_stored_in_the_clear_become_digests_of_the_same_keys():
    from django.contrib.auth import get_user_model

    from provenance.access import tokens

    person = get_user_model().objects.db_manager(OWNER_ALIAS).create_user("mig-person", "p@example.com", "pw-1234-x")
    leaves = MigrationExecutor(connections[OWNER_ALIAS]).loader.graph.leaf_nodes()
    before = [("provenance", "0012_sealed_replay_secrets")]
    key, bare_key = "ab12cd" + "0" * 34, "ef34ab" + "1" * 34
    try:
        executor = _migrate(before)
        old = executor.loader.project_state(before).apps
        Token = old.get_model("authtoken", "Token")
        other = get_user_model().objects.db_manager(OWNER_ALIAS).create_user("mig-other", "o@example.com", "pw-1234-x")
        Token.objects.using(OWNER_ALIAS).create(key=key, user_id=person.pk)
        Token.objects.using(OWNER_ALIAS).create(key=bare_key, user_id=other.pk)  # never used: no lease yet
        old.get_model("provenance", "ApiTokenLease").objects.using(OWNER_ALIAS).create(token_id=key)
        _raw("SET CONSTRAINTS ALL IMMEDIATE")
        _migrate([("provenance", "0013_hashed_api_token_keys")])
    finally:
        _migrate(leaves)
    stored = dict(_raw("SELECT user_id, key FROM authtoken_token WHERE user_id IN (%s, %s)", [person.pk, other.pk]))
    assert stored == {person.pk: tokens.api_key_digest(key), other.pk: tokens.api_key_digest(bare_key)}
    leases = dict(_raw("SELECT token_id, prefix FROM provenance_apitokenlease"))
    assert leases[tokens.api_key_digest(key)] == "ab12cd" and leases[tokens.api_key_digest(bare_key)] == "ef34ab"
