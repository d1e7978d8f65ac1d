"""The migration that gives each workspace its provisional-id counter starts it above every id its
recordings were handed, so no id handed out before the migration is handed out again after it."""
import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from core.db_roles import OWNER_ALIAS
from provenance.models import Workspace

# Not a transactional test: the owner's connection runs the migrations inside the test's transaction,
# which rolls the columns and rows back with everything else (a transactional test's flush as the owner
# would meet the audit table's TRUNCATE trigger).
pytestmark = pytest.mark.django_db(databases=["default", OWNER_ALIAS])

BEFORE = [("provenance", "0010_agent_replay_secret")]
AFTER = [("provenance", "0011_provisional_action_counter")]


def _migrate(targets) -> MigrationExecutor:
    # As the owner: the application's role may not change tables. A fresh executor each time: the
    # loader reads which migrations are applied when it is built.
    executor = MigrationExecutor(connections[OWNER_ALIAS])
    executor.migrate(targets)
    return executor


def test_the_counter_starts_above_every_id_the_workspace_recordings_were_handed():
    leaves = MigrationExecutor(connections[OWNER_ALIAS]).loader.graph.leaf_nodes()
    try:
        executor = _migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        workspaces = old.get_model("provenance", "Workspace").objects.using(OWNER_ALIAS)
        recordings = old.get_model("provenance", "Recording").objects.using(OWNER_ALIAS)
        busy, other, quiet = (workspaces.create(name=n) for n in ("busy", "other", "quiet"))
        now = timezone.now()
        for ws, status, first, next_action in ((busy, "committed", 1, 7), (busy, "abandoned", 7, 41),
                                               (busy, "open", 41, 12), (busy, "expired", 12, 13),
                                               (other, "open", 3, 5)):
            recordings.create(workspace=ws, status=status, first_action=first, touched_at=now,
                              state={"records": [{"id": first}], "next_action": next_action})
        # A recording from before `next_action` was stored (or one that never stored it) counts as none.
        recordings.create(workspace=other, status="committed", first_action=1, touched_at=now, state={"records": []})
        _migrate(AFTER)
    finally:
        _migrate(leaves)
    # Read on the owner's connection: the rows are in its transaction.
    counters = dict(Workspace.objects.using(OWNER_ALIAS).values_list("name", "next_provisional_action"))
    assert counters == {"busy": 41, "other": 5, "quiet": 0}
