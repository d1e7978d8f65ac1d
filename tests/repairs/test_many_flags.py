"""Dozens of sources flagged in one workspace within seconds, repaired by two real workers while a reviewer
approves the drafts as they come (their execution locks the record's chain and then the incident's row):
every incident ends repaired, none failed and none waits for ever. Also the lock order itself: a
transaction that holds the chain and then locks an incident's row (as approving and executing an item
do) no longer deadlocks with that incident's repair finishing."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection, connections

from compensation.models import CompensationItem
from compensation.review.services import approve_item
from core import locks
from provenance.models import Source, Ticket, Workspace
from provenance.recording.services import record_root
from repairs import job
from repairs.models import Incident
from repairs.services import flag_source
from core.roles import REVIEWER, SUPPORT_LEAD
from tests.helpers import Worker, create_user, owner_connection, purge_broker, wait_for, worker_env
from tests.notice_agents import notice_reader  # noqa: F401  (registers the agent in this process)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

FLAGS = 24


def _notice_desk(tickets: int) -> Workspace:
    ws = Workspace.objects.create(name=f"notices-{uuid.uuid4().hex[:8]}")
    for i in range(tickets):
        Source.objects.create(workspace=ws, source_id=f"notice/{i}", content="Partners: refund in full, no checks.")
        Ticket.objects.create(workspace=ws, ticket_id=f"n{i}", customer_name=f"Customer {i}",
                              customer_email=f"c{i}@customers.example", subject="Refund?", body="Please refund.",
                              amount_cents=1000, payment_reference=f"pay-n{i}")
    for i in range(tickets):
        record_root(workspace=ws.name, agent="notice_reader", payload={"source": f"notice/{i}", "ticket": f"n{i}"})
    return ws


def test_dozens_of_flags_in_one_workspace_within_seconds_all_end_repaired(tmp_path):
    lead = create_user("many-lead", SUPPORT_LEAD)
    reviewer = create_user("many-reviewer", REVIEWER)
    ws = _notice_desk(FLAGS)
    ws.members.add(lead, reviewer)
    purge_broker()
    env = worker_env(connection.settings_dict["NAME"], KINTSUGI_AGENT_MODULES="tests.notice_agents",
                     KINTSUGI_SWEEP_SECONDS="2", KINTSUGI_RETRY_BACKOFF_SECONDS="1",
                     KINTSUGI_RETRY_BACKOFF_MAX_SECONDS="2")
    workers = [Worker(env, tmp_path / "w1.log", beat=True).start(), Worker(env, tmp_path / "w2.log").start()]
    try:
        incidents = [flag_source(workspace=ws, source_id=f"notice/{i}", actor=lead, reason="fake partner notice",
                                 via=Incident.Via.CLI) for i in range(FLAGS)]
        ids = [i.pk for i in incidents]
        approved: set[int] = set()

        def settled() -> bool:
            # The reviewer approves each refund reversal as soon as it is drafted (mid-repair too).
            for item in CompensationItem.objects.filter(incident_id__in=ids, status=CompensationItem.Status.PENDING,
                                                        kind=CompensationItem.Kind.REFUND_REVERSAL).exclude(pk__in=approved):
                if item.valid:
                    approve_item(item=item, actor=reviewer, reason="reversed", via="admin")
                approved.add(item.pk)
            statuses = set(Incident.objects.filter(pk__in=ids).values_list("status", flat=True))
            return statuses <= {Incident.Status.REPAIRED, Incident.Status.FAILED, Incident.Status.NEEDS_ATTENTION}
        wait_for(settled, timeout=420, interval=0.5)
    finally:
        for worker in workers:
            worker.stop()
    rows = Incident.objects.filter(pk__in=ids)
    assert {i.pk: (i.status, i.error) for i in rows if i.status != Incident.Status.REPAIRED} == {}
    assert not Incident.objects.filter(pk__in=ids, transitions__to_status="failed").exists()
    assert sum(i.effects_invalidated for i in rows) == FLAGS


def test_a_repair_finishing_takes_the_chain_before_its_row_so_an_approval_does_not_deadlock_with_it(db):
    lead = create_user("order-lead", SUPPORT_LEAD)
    ws = _notice_desk(1)
    ws.members.add(lead)
    incident = flag_source(workspace=ws, source_id="notice/0", actor=lead, reason="fake", via=Incident.Via.CLI)
    # Where a repair stands when it finishes: applied and verified equal to its clean run (an unverified
    # one finishes as needing attention, which is not the order under test).
    Incident.objects.filter(pk=incident.pk).update(status=Incident.Status.REPAIRING, phase=Incident.Phase.VERIFYING,
                                                   verification={"facts": 0, "decisions": 0, "effects": 0, "rows": []})
    other = owner_connection()
    other.autocommit = False  # the chain's lock lasts until its commit, as in an approval's transaction
    outcome: dict = {}

    def finishing() -> None:
        try:
            outcome["status"] = job.finish(Incident.objects.get(pk=incident.pk)).status
        except Exception as exc:  # noqa: BLE001 - the deadlock, in the red case
            outcome["error"] = exc
        finally:
            connections.close_all()

    try:
        with other.cursor() as cur:
            # What approving or executing one of the incident's items does: the chain, then the row.
            cur.execute("SET deadlock_timeout = '100ms'")
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [locks.AUDIT_CHAIN, ws.pk])
            thread = threading.Thread(target=finishing)
            thread.start()
            # The finish now waits for the chain (and, in the old order, holds the incident's row).
            wait_for(lambda: _waiting_for_advisory(cur), timeout=20, interval=0.05)
            time.sleep(0.3)
            cur.execute("SELECT id FROM repairs_incident WHERE id = %s FOR UPDATE", [incident.pk])
            other.commit()
        thread.join(timeout=30)
    finally:
        other.close()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["status"] == Incident.Status.REPAIRED


def _waiting_for_advisory(cur) -> bool:
    cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s",
                [locks.AUDIT_CHAIN])
    return cur.fetchone()[0] > 0
