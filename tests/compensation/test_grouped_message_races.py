"""A customer's one message about several tickets, decided by two reviewers at once (threads, real
Postgres, each with its own connection): whatever the order, the message ends saying what the money
items' final decisions make happen, its approval binds that text, and nothing leaves in older words.

The desk: one customer with three tickets to correct in USD, EUR and JPY (tests/compensation/
generated_desks.py), each with its own refund reversal, and the one message explaining all three."""
from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone

from compensation.delivery import approval
from compensation.delivery.execution import NotApproved, execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import DecisionRefused, approve_item, reject_item
from core.roles import REVIEWER
from provenance.models import OutboxEmail
from tests.compensation import generated_desks as gen
from tests.helpers import create_user, make_people, purge_broker

pytestmark = pytest.mark.django_db(transaction=True)
K, St = CompensationItem.Kind, CompensationItem.Status
DESK = gen.DeskIn([gen.CustomerIn("Ada Byron", "ada.byron@customers.example", "de_DE", [
    gen.TicketIn("g1001", "vip_change", "standard", "USD", 7550, "Kettle order 1001", 0, True),
    gen.TicketIn("g2002", "vip_unopened", "standard", "EUR", 12000, "Lamp order 2002", 2, True),
    gen.TicketIn("g3003", "vip_question", "standard", "JPY", 980000, "Clock order 3003", 3, True)])],
    workspace_locale="", totals_template=False, seed=11)
TICKETS = [t.ticket_id for t in DESK.customers[0].tickets]


@pytest.fixture
def desk(settings, outbox_backend):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # executions enqueued go to an idle broker: the test executes
    settings.KINTSUGI_UNDO_SECONDS = 0
    people = make_people()
    incident = gen.build(DESK, flagger=people.lead_reviewer, lead=people.lead)
    alice, bob = (create_user(name, REVIEWER, workspaces=[incident.workspace]) for name in ("alice", "bob"))
    items = incident.compensation_items
    yield SimpleNamespace(incident=incident, alice=alice, bob=bob, message=items.get(kind=K.CORRECTION_EMAIL),
                          money={t: items.get(kind=K.REFUND_REVERSAL, ticket_id=t) for t in TICKETS})
    purge_broker()


def together(*calls) -> list:
    """Run each call in a thread of its own (its own connection), started at one moment; what each
    returned or raised, in order."""
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(n, call):
        try:
            barrier.wait(timeout=20)
            out[n] = call()
        except Exception as exc:  # looked at by the test
            out[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a decision never returned"
    unexpected = [r for r in out if isinstance(r, Exception) and not isinstance(r, DecisionRefused)]
    assert not unexpected, unexpected
    return out


def fresh(item) -> CompensationItem:
    return CompensationItem.objects.get(pk=item.pk)


def sent(message) -> list[OutboxEmail]:
    return list(OutboxEmail.objects.filter(idempotency_key=f"compensation:{message.pk}"))


def assert_says_what_happens(desk) -> CompensationItem:
    """The message's text against its money items' decisions now: a rejected one's entry says the refund
    stays as it is and names no amount back, every other entry still announces its own; an approval binds
    exactly this text; whatever left, left in it."""
    message = fresh(desk.message)
    expected, subjects = gen.expected(DESK)
    (customer,) = [e for e in expected.values() if e.tickets]
    entries = re.split(r"\n\n(?=\d+\. About your request)", message.body)[1:]
    for ticket, (cur, _, back) in customer.tickets.items():
        (entry,) = [e for e in entries if subjects[ticket] in e]
        correction = entry.split("Here is our")[0]
        if fresh(desk.money[ticket]).status in (St.REJECTED, St.CANCELLED):
            assert "stays as it is" in correction and f"{gen.money(back, cur, customer.locale)} back" not in correction
        else:
            assert f"{gen.money(back, cur, customer.locale)} back" in correction and "stays as it is" not in correction
    assert message.valid, message.problems
    if message.status in (St.APPROVED, St.EXECUTED):
        assert message.approved_hash == approval.content_hash(message)
        approved = AuditEvent.objects.filter(action="item.approved", subject_id=str(message.pk)).order_by("seq").last()
        assert approved.data["content_hash"] == message.approved_hash
    else:
        assert message.approved_hash == ""
    out = sent(message)
    assert len(out) <= 1 and [(m.to, m.subject, m.body) for m in out] == (
        [(message.to, message.subject, message.body)] if message.status == St.EXECUTED else [])
    return message


def read(item) -> str:
    """What a reviewer's page binds a decision to: the item's content hash as they read it."""
    return approval.content_hash(fresh(item))


def test_two_reviewers_rejecting_two_of_the_customers_reversals_at_once(desk):
    a, b, c = (desk.money[t] for t in TICKETS)
    together(lambda: reject_item(item=a, actor=desk.alice, reason="they keep it", via="admin"),
             lambda: reject_item(item=b, actor=desk.bob, reason="they keep it too", via="admin"))
    message = assert_says_what_happens(desk)
    assert message.status == St.PENDING and message.body.count("stays as it is") == 2
    approve_item(item=c, actor=desk.alice, reason="ok", via="admin")
    approve_item(item=message, actor=desk.bob, reason="read it", via="admin", shown=read(message))
    assert execute_item(item_id=message.pk).status == St.EXECUTED
    assert_says_what_happens(desk)


def test_approving_the_message_as_read_while_another_reviewer_rejects_one_of_its_reversals(desk):
    a, b, c = (desk.money[t] for t in TICKETS)
    shown = read(desk.message)
    approved, rejected = together(
        lambda: approve_item(item=desk.message, actor=desk.alice, reason="read it", via="admin", shown=shown),
        lambda: reject_item(item=c, actor=desk.bob, reason="they keep it", via="admin"))
    assert rejected.status == St.REJECTED
    message = assert_says_what_happens(desk)
    # Whichever came first: refused as no longer what Alice read, or approved and then reopened.
    assert message.status == St.PENDING and "stays as it is" in message.body
    assert isinstance(approved, DecisionRefused) or AuditEvent.objects.filter(
        action="item.reopened", subject_id=str(message.pk)).exists()
    with pytest.raises(DecisionRefused, match="changed after it was shown"):
        approve_item(item=message, actor=desk.alice, reason="read it", via="admin", shown=shown)
    for money in (a, b):
        approve_item(item=money, actor=desk.alice, reason="ok", via="admin")
    approve_item(item=message, actor=desk.alice, reason="read it again", via="admin", shown=read(message))
    assert execute_item(item_id=message.pk).status == St.EXECUTED
    assert_says_what_happens(desk)


def test_decisions_racing_the_messages_execution_never_send_older_words(desk):
    """Alice approves two reversals, Bob rejects the third and approves the message again as it then
    reads, and a worker tries to send the message all along: it leaves once, in the final words."""
    a, b, c = (desk.money[t] for t in TICKETS)
    approve_item(item=desk.message, actor=desk.bob, reason="read it", via="admin", shown=read(desk.message))
    stop = threading.Event()

    def alice():
        for money in (a, b):
            approve_item(item=money, actor=desk.alice, reason="ok", via="admin")

    def bob():
        reject_item(item=c, actor=desk.bob, reason="they keep it", via="admin")
        return approve_item(item=desk.message, actor=desk.bob, reason="read it again", via="admin",
                            shown=read(desk.message))

    def worker():
        while not stop.is_set():
            try:
                if execute_item(item_id=desk.message.pk).status == St.EXECUTED:
                    return
            except NotApproved:  # reopened by Bob's rejection, until he approves it again
                pass
            time.sleep(0.005)

    def reviewers():
        try:
            return together(alice, bob)
        finally:
            stop.set()

    together(reviewers, worker)
    message = fresh(desk.message)
    if message.status == St.APPROVED:  # the worker stopped before the last approval: it goes now
        assert execute_item(item_id=message.pk).status == St.EXECUTED
    message = assert_says_what_happens(desk)
    assert message.status == St.EXECUTED and message.body.count("stays as it is") == 1


def test_a_worker_putting_the_message_right_and_a_rejection_of_another_of_its_reversals_do_not_deadlock(
        desk, monkeypatch):
    """Red case kept (deterministic): the worker holds the approved message, finds it stale (a rejection
    it saw before its rewrite, made here behind the code's back) and must rewrite it, while Bob, rejecting
    another of its reversals, holds the workspace's chain and waits for the message. The execution locked
    the incident's row with the message (Bob's decision locks it with his reversal) and took the chain
    while holding the message: Postgres broke the deadlock by failing one of them."""
    from compensation.delivery import execution

    a, b, c = (desk.money[t] for t in TICKETS)
    approve_item(item=desk.message, actor=desk.alice, reason="read it", via="admin", shown=read(desk.message))
    CompensationItem.objects.filter(pk=c.pk).update(status=St.REJECTED)
    holding, go, worker, bob_pid = threading.Event(), threading.Event(), {}, {}
    undo_window = execution.approval.in_undo_window

    def paused(item):  # called by execute_item with the message locked
        if threading.get_ident() == worker.get("thread"):
            holding.set()
            go.wait(timeout=30)
        return undo_window(item)

    monkeypatch.setattr(execution.approval, "in_undo_window", paused)

    def run_worker():
        worker["thread"] = threading.get_ident()
        return execute_item(item_id=desk.message.pk)

    def bob():
        holding.wait(timeout=30)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            bob_pid["pid"] = cur.fetchone()[0]
        return reject_item(item=b, actor=desk.bob, reason="they keep it", via="admin")

    def conductor():  # lets the worker go on once Bob waits for a lock
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with connection.cursor() as cur:
                cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [bob_pid.get("pid", 0)])
                row = cur.fetchone()
            if row and row[0] == "Lock":
                break
            time.sleep(0.02)
        else:
            raise AssertionError("Bob never waited for the worker's lock")
        go.set()

    done, rejected, _ = together(run_worker, bob, conductor)
    assert rejected.status == St.REJECTED and done.status in (St.APPROVED, St.PENDING)
    message = assert_says_what_happens(desk)
    assert message.status == St.PENDING and message.body.count("stays as it is") == 2 and not sent(message)


def test_a_message_does_not_leave_while_a_reversal_it_announces_can_still_be_undone(desk, settings):
    """Red case kept: approved long ago, the message left as soon as its reversals were approved, while
    their approvals could still be taken back (the undo window); Alice then undid one and rejected it,
    and the customer had read that its money would come back."""
    settings.KINTSUGI_UNDO_SECONDS = 600
    a, b, c = (desk.money[t] for t in TICKETS)
    approve_item(item=desk.message, actor=desk.bob, reason="read it", via="admin", shown=read(desk.message))
    CompensationItem.objects.filter(pk=desk.message.pk).update(decided_at=timezone.now() - timedelta(seconds=601))
    for money in (a, b, c):
        approve_item(item=money, actor=desk.alice, reason="ok", via="admin")
    # A sweep (or a retried task) runs the message's execution now: it waits for the reversals' windows.
    assert execute_item(item_id=desk.message.pk).status == St.APPROVED and not sent(desk.message)
    approval.undo(item=c, actor=desk.alice, reason="wrong click", via="admin")
    reject_item(item=c, actor=desk.alice, reason="they keep it", via="admin")
    message = assert_says_what_happens(desk)
    assert message.status == St.PENDING and "stays as it is" in message.body
    # Approved again as it now reads, it leaves once the windows have closed, in those words.
    approve_item(item=message, actor=desk.bob, reason="read it again", via="admin", shown=read(message))
    CompensationItem.objects.filter(incident=desk.incident).update(decided_at=timezone.now() - timedelta(seconds=601))
    assert execute_item(item_id=message.pk).status == St.EXECUTED
    assert_says_what_happens(desk)
