import threading

import pytest
from django.db import connection

from core.audit import verification
from compensation.delivery.deliveries import DeliveryRefused, send
from compensation.delivery.execution import NotApproved, execute_approved, execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item, bulk_approve
from compensation.tasks import execute_compensation
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import LedgerEntry, OutboxEmail
from provenance.recording.services import desk_run, get_workspace
from repairs.services import flag_source
from repairs.job import run_repair
from tests.helpers import purge_broker, repaired_incident, wait_for

K = CompensationItem.Kind


def _sent(workspace):
    ledger = sorted((e.kind, e.ticket_id, e.amount_cents) for e in
                    LedgerEntry.objects.filter(workspace=workspace, idempotency_key__startswith="compensation:"))
    mail = sorted(m.to for m in OutboxEmail.objects.filter(idempotency_key__startswith="compensation:"))
    return ledger, mail


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_approving_all_executes_each_exactly_once_in_the_worker_even_when_retried(people, celery_worker_process, settings):
    incident = repaired_incident(flagger=people.lead, settings=settings)
    items = list(incident.compensation_items.all())
    result = bulk_approve(items=items, actor=people.reviewer, reason="all checked", via="admin")
    assert len(result.approved) == 10 and not result.refused
    wait_for(lambda: incident.compensation_items.filter(status="executed").count() == 10, timeout=60)
    first = _sent(incident.workspace)
    # Retries: the task delivered again to the worker, and run again here.
    for item in items:
        execute_compensation.delay(item.pk)
        execute_compensation.apply(args=[item.pk])
    wait_for(lambda: _queue_empty(), timeout=30)
    assert _sent(incident.workspace) == first
    ledger, mail = first
    assert ledger == [("reversal_request", t, cents) for t, cents in
                      [("t04", 5500), ("t05", 7500), ("t06", 9000), ("t07", 10000), ("t08", 8000)]]
    # One message per customer: the replies of t05-t08 left inside their corrections, not beside them.
    assert len(mail) == len(set(mail)) == 5
    assert mail.count("dev.patel@customers.example") == 1  # t04: one email that explains the difference
    assert AuditEvent.objects.filter(action="item.executed").count() == 10


def _queue_empty() -> bool:
    from kintsugi_site.celery import app

    with app.connection_for_write() as conn:
        return conn.default_channel.client.llen("celery") == 0


@pytest.mark.django_db
def test_a_worker_that_died_after_sending_sends_nothing_twice(people, outbox_backend, django_capture_on_commit_callbacks):
    incident = repaired_incident(flagger=people.lead)
    pending = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t05")
    with pytest.raises(NotApproved):  # only approved items execute
        execute_item(item_id=pending.pk)
    with pytest.raises(DeliveryRefused, match="never approved"):
        send(pending)
    with django_capture_on_commit_callbacks(execute=False):  # the worker never picks these up
        reversal = approve_item(item=incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t04"),
                                actor=people.reviewer, reason="ok", via="admin")
        email = approve_item(item=incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t04"),
                             actor=people.reviewer, reason="ok", via="admin")
    for item in (reversal, email):
        send(item)  # the call went out, then the worker died before marking the item executed
        assert CompensationItem.objects.get(pk=item.pk).status == "approved"
        execute_item(item_id=item.pk)  # the retry
        execute_item(item_id=item.pk)  # and a double click
    assert _sent(incident.workspace) == ([("reversal_request", "t04", 5500)], ["dev.patel@customers.example"])
    assert CompensationItem.objects.get(pk=email.pk).execution_attempts == 1


@pytest.mark.django_db(transaction=True)
def test_two_executors_at_once_send_once(people, outbox_backend, settings):
    incident = repaired_incident(flagger=people.lead, settings=settings)
    items = [incident.compensation_items.get(kind=k, ticket_id="t06") for k in (K.REFUND_REVERSAL, K.CORRECTION_EMAIL)]
    for item in items:
        approve_item(item=item, actor=people.reviewer, reason="ok", via="admin")  # enqueued to an idle broker
    purge_broker()
    barrier = threading.Barrier(4)
    errors = []

    def run(pk):
        try:
            barrier.wait(timeout=10)
            execute_item(item_id=pk)
        except Exception as exc:  # pragma: no cover - surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i.pk,)) for i in items for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert _sent(incident.workspace) == ([("reversal_request", "t06", 9000)], ["farid.haddad@customers.example"])
    assert AuditEvent.objects.filter(action="item.executed").count() == 2


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_down_nothing_is_lost_and_every_change_is_audited(people, dead_broker, outbox_backend, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="broker-down")
    get_workspace("broker-down").members.add(people.lead, people.reviewer)
    with dead_broker():
        incident = flag_source(workspace=get_workspace("broker-down"), source_id=POISONED_PAGE, actor=people.lead,
                               reason="poisoned", via="admin")
    incident.refresh_from_db()
    assert incident.status == "blocked" and "could not enqueue" in incident.error
    blocked = AuditEvent.objects.get(action="incident.blocked", incident=incident)
    assert (blocked.from_status, blocked.via) == ("open", "worker")
    incident = run_repair(incident_id=incident.pk)  # what the retry would run
    item = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t07")
    with dead_broker():
        approve_item(item=item, actor=people.reviewer, reason="ok", via="admin")
    assert CompensationItem.objects.get(pk=item.pk).status == "approved"  # approved, waiting for a worker
    assert execute_approved() == 1  # the sweep (task execute_waiting_compensations) picks it up
    assert _sent(incident.workspace) == ([("reversal_request", "t07", 10000)], [])
    statuses = verification.verify_all()
    assert incident.workspace_id in {s.workspace_id for s in statuses} and all(s.holds for s in statuses)
