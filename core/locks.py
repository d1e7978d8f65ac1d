"""Every Postgres advisory-lock namespace the product takes, in one place.

All locks use the two-key form `pg_advisory_(xact_)lock(namespace, key)`: the first key says whose
lock it is, the second which object (a workspace, incident or part id). Two uses that shared a
namespace would block each other whenever their ids happened to be equal, so a use gets its own
number here and imports it from here;
tests/test_locks.py checks that no number repeats and that no product module spells one out itself.
"""
from __future__ import annotations

from contextlib import contextmanager

from django.db import connection

# (WORKSPACE_GRAPH, workspace id): every writer of a workspace graph (recording, repairs).
WORKSPACE_GRAPH = 7171
# (REPAIR, incident id): held while a repair runs; other sessions read it from pg_locks.
REPAIR = 7172
# (REPAIR_PART, part id): held while a part of a split repair is walked.
REPAIR_PART = 7173
# (BASELINE, workspace id): while a clean baseline is recorded or diffed.
BASELINE = 7174
# (DRAFT_PART, incident id * parts + part): while a part of an incident's items is drafted.
DRAFT_PART = 7175
# (AUDIT_CHAIN, workspace id, or 0 for the system chain): appends to one audit hash chain.
AUDIT_CHAIN = 7176
# (WORKSPACE_REPAIRS, workspace id): held while a repair of the workspace runs, so repairs of one
# workspace run one at a time; the graph's own lock (WORKSPACE_GRAPH) only while one applies.
WORKSPACE_REPAIRS = 7177
# (NOTIFY_REVIEWERS, incident id): while the reviewers of an incident are told its cases are ready.
NOTIFY_REVIEWERS = 7178

NAMESPACES: dict[str, int] = {name: value for name, value in dict(globals()).items()
                              if name.isupper() and isinstance(value, int)}


@contextmanager
def advisory_lock(namespace: int, key: int, *, wait: bool):
    """A session-level advisory lock on (namespace, key); yields whether it was taken (always, with
    `wait`). Released on exit, also when the block raises."""
    with connection.cursor() as cur:
        if wait:
            cur.execute("SELECT pg_advisory_lock(%s, %s)", [namespace, key])
            got = True
        else:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
            got = cur.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
