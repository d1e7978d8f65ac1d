"""The application role is the cluster's, not one database's: two processes creating their databases at
once (the suite's parallel workers) both find it missing, and the one that creates it second must not fail."""
import uuid

import pytest
from django.db import DatabaseError, connections

from core.db_roles import OWNER_ALIAS, _create_role

pytestmark = pytest.mark.django_db(databases=["default", OWNER_ALIAS])


class _CheckedBeforeTheOtherCreatedIt:
    """A cursor whose first answer is the one read before the other process created the role."""

    def __init__(self, cursor):
        self.cursor, self.answers = cursor, 0

    def execute(self, sql, params=None):
        return self.cursor.execute(sql, params)

    def fetchone(self):
        self.answers += 1
        row = self.cursor.fetchone()
        return None if self.answers == 1 else row


def test_a_role_another_process_created_after_the_check_is_taken_as_created():
    owner = connections[OWNER_ALIAS]
    name = f"ks_race_{uuid.uuid4().hex[:8]}"
    with owner.cursor() as cur:
        cur.execute(f"CREATE ROLE {name} LOGIN")  # the other process, first
        racing = _CheckedBeforeTheOtherCreatedIt(cur)
        _create_role(owner, racing, role=name, password="")
        assert racing.answers == 2  # it tried, failed, and found the role there
        cur.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", [name])
        assert cur.fetchone()[0] == 1


def test_a_create_that_fails_for_another_reason_still_fails():
    owner = connections[OWNER_ALIAS]
    with owner.cursor() as cur, pytest.raises(DatabaseError, match="reserved"):
        _create_role(owner, cur, role="pg_kintsugi_reserved", password="")
