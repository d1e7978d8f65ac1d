"""Each audit chain has a lock of its own: audited writes in two workspaces never wait on each other."""
import time

import pytest
from django.db import OperationalError, connection, transaction

from core.audit import chains, trail
from core import locks
from provenance.models import Workspace
from tests.helpers import owner_connection

pytestmark = pytest.mark.django_db(transaction=True)


def _append(workspace, *, wait_ms: int) -> float:
    started = time.monotonic()
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = %s", [f"{wait_ms}ms"])
        trail.record(action="test.append", subject_type="test", subject_id=1, via="cli", workspace=workspace)
    return time.monotonic() - started


def test_a_held_chain_lock_blocks_its_own_chain_only():
    a, b = Workspace.objects.create(name="lock-a"), Workspace.objects.create(name="lock-b")
    with owner_connection() as other:
        with other.transaction():
            # Another transaction is appending to A (it holds A's chain lock until it commits).
            other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [locks.AUDIT_CHAIN, a.pk])
            assert _append(b, wait_ms=5000) < 1.0  # B commits without waiting
            assert _append(None, wait_ms=5000) < 1.0  # and so does the system chain
            with pytest.raises(OperationalError, match="lock timeout"):
                _append(a, wait_ms=300)  # the red check: A waits for A's lock
    assert _append(a, wait_ms=5000) < 1.0
    assert [e.seq for e in chains.chain_events(a)] == [1] and [e.seq for e in chains.chain_events(b)] == [1]
