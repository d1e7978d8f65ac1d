"""`flush` (the test runner's between transactional tests, a developer's reset) empties every table of
the database, the audit record included, and keeps only the rows that describe the schema: content
types and permissions, which post_migrate would write again. Small tables are emptied by DELETE,
a table above the bound or a reset of the ids by one TRUNCATE of every table."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from provenance.management.commands import flush as flush_command
from provenance.recording.services import desk_run
from core.roles import SUPPORT_LEAD
from provenance.models import Workspace
from tests.helpers import create_user, owner_connection

pytestmark = pytest.mark.django_db(transaction=True)

KEPT = {ContentType._meta.db_table, Permission._meta.db_table}


def _rows_by_table() -> dict[str, int]:
    with owner_connection() as db:
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _schema_rows() -> tuple[set, set]:
    return (set(ContentType.objects.values_list("pk", "app_label", "model")),
            set(Permission.objects.values_list("pk", "codename", "content_type_id")))


def _flush(**options) -> None:
    call_command("flush", interactive=False, verbosity=0, stdout=io.StringIO(), **options)


@pytest.fixture
def a_desk_and_a_person():
    desk_run(workspace="flush-desk")
    create_user("flush-lead", SUPPORT_LEAD, workspaces=[Workspace.objects.get(name="flush-desk")])
    before = _rows_by_table()
    # The desk writes the record, the ledger, tickets and people: enough tables to miss one.
    assert sum(1 for t, n in before.items() if n and t not in KEPT) >= 8
    return before


@pytest.mark.parametrize("delete_at_most", [flush_command.DELETE_AT_MOST, 2], ids=["delete", "truncate"])
def test_a_flush_empties_every_table_but_the_schemas_own_rows(a_desk_and_a_person, monkeypatch, delete_at_most):
    monkeypatch.setattr(flush_command, "DELETE_AT_MOST", delete_at_most)
    schema = _schema_rows()
    _flush(reset_sequences=False)
    after = _rows_by_table()
    assert {t: n for t, n in after.items() if n and t not in KEPT} == {}
    assert _schema_rows() == schema  # the same rows, under the same ids


def test_a_flush_that_resets_sequences_restarts_ids():
    create_user("first")
    create_user("second")
    _flush(reset_sequences=True)
    assert create_user("again").pk == 1


def test_a_flush_without_a_reset_keeps_counting_ids():
    taken = create_user("first").pk
    _flush(reset_sequences=False)
    assert create_user("again").pk > taken


def test_a_user_made_after_a_flush_gets_the_permissions_a_role_names():
    _flush(reset_sequences=False)
    lead = create_user("after-flush", SUPPORT_LEAD)
    assert lead.has_perm("repairs.flag_source")


def _post_migrate_sent(monkeypatch) -> list:
    sent = []
    monkeypatch.setattr(flush_command, "emit_post_migrate_signal", lambda *args: sent.append(args))
    return sent


def test_a_flush_sends_no_post_migrate_whose_receivers_would_write_nothing(monkeypatch):
    sent = _post_migrate_sent(monkeypatch)
    _flush(reset_sequences=False)
    assert sent == []
    assert create_user("after", SUPPORT_LEAD).has_perm("provenance.view_source")


def test_a_flush_sends_post_migrate_once_another_receiver_listens(monkeypatch):
    """The red case: an app whose post_migrate writes rows of its own must still get it after a flush."""
    from django.db.models.signals import post_migrate

    sent = _post_migrate_sent(monkeypatch)

    def seeds_its_rows(sender, **kwargs):
        pass

    post_migrate.connect(seeds_its_rows, dispatch_uid="test-flush-seeds")
    try:
        _flush(reset_sequences=False)
    finally:
        post_migrate.disconnect(dispatch_uid="test-flush-seeds")
    assert len(sent) == 1
