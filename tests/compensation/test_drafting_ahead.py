"""Drafting ahead: a repair's items are drafted once its plan is checkpointed, before verification, by
the repairing worker or by an idle worker (repairs.tasks.draft_ahead_task). Whoever drafts, the items
are drafted once, and nobody decides them before the incident is repaired."""
import psycopg
import pytest
from django.db import connection

from compensation.models import AuditEvent, CompensationItem
from compensation.drafting.drafts import DRAFT_PARTS, draft_compensations, ticket_parts
from compensation.drafting.drafts import draft_repair as draft_ahead
from core.locks import DRAFT_PART as DRAFT_LOCK
from compensation.review.services import DecisionRefused, approve_item
from repairs import job
from repairs.models import Incident
from repairs.job import run_repair
from repairs.tasks import draft_ahead_task
from tests.helpers import app_role_may_delete, repaired_incident

pytestmark = pytest.mark.django_db


@pytest.fixture
def planned(people, monkeypatch):
    """The canonical repair, walked and applied but stopped before its baseline and drafts (as if the
    repairing worker were still verifying): `repairing`, with its plan and effects, and no items."""
    def stop(incident):
        raise RuntimeError("stopped before verification")

    monkeypatch.setattr(job, "verify_and_draft", stop)
    incident = repaired_incident(flagger=people.lead)
    monkeypatch.undo()
    assert incident.status == "failed" and incident.plan is not None and incident.effects.exists()
    Incident.objects.filter(pk=incident.pk).update(status="repairing", error="")
    assert not incident.compensation_items.exists()
    return Incident.objects.get(pk=incident.pk)


def _drafted_events(incident) -> int:
    return AuditEvent.objects.filter(incident_id=incident.pk, action="item.drafted").count()


def test_an_idle_worker_drafts_the_items_before_the_repair_is_verified(planned, people):
    assert draft_ahead_task(planned.pk) is True
    assert planned.compensation_items.count() == 10 and _drafted_events(planned) == 10
    item = planned.compensation_items.filter(kind=CompensationItem.Kind.REFUND_REVERSAL).first()
    # The gate's red case: the same approval succeeds once the incident is repaired (below).
    with pytest.raises(DecisionRefused, match="once its repair is verified"):
        approve_item(item=item, actor=people.reviewer, reason="ok", via="admin")
    Incident.objects.filter(pk=planned.pk).update(status="blocked")
    incident = run_repair(incident_id=planned.pk)  # the repairing worker finishes: nothing drafted twice
    assert incident.status == "repaired", incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert incident.compensations == 10 and incident.compensation_items.count() == 10
    assert _drafted_events(incident) == 10
    assert approve_item(item=item, actor=people.reviewer, reason="ok", via="admin").status == "approved"


def test_a_part_another_worker_is_drafting_is_left_to_it(planned):
    parts = ticket_parts(planned, DRAFT_PARTS)  # by customer: one customer's tickets are drafted together
    held = min(parts.values())
    other = psycopg.connect(**{k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"},
                            autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [DRAFT_LOCK, planned.pk * DRAFT_PARTS + held])
        assert draft_ahead(incident=planned, wait=False) is False
        assert draft_ahead_task(planned.pk) is False
        drafted = set(planned.compensation_items.values_list("ticket_id", flat=True))
        assert drafted and not any(parts[t] == held for t in drafted)  # every other part is drafted
    finally:
        # Unlocked before closing: a closed connection's backend lets go of its locks a moment later,
        # which the next line could beat.
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [DRAFT_LOCK, planned.pk * DRAFT_PARTS + held])
        other.close()
    assert draft_ahead(incident=planned, wait=False) is True
    assert draft_ahead(incident=planned, wait=True) is True  # again: finds every item there
    assert planned.compensation_items.count() == 10 and _drafted_events(planned) == 10


def test_parts_drafted_apart_equal_one_drafting(planned):
    assert draft_ahead(incident=planned, wait=True) is True
    apart = sorted(planned.compensation_items.values_list("kind", "ticket_id", "amount_cents", "body", "valid", "path"))
    with app_role_may_delete(CompensationItem):
        CompensationItem.objects.filter(incident=planned).delete()
    draft_compensations(incident=planned)
    assert sorted(planned.compensation_items.values_list("kind", "ticket_id", "amount_cents", "body", "valid",
                                                         "path")) == apart


def test_the_task_does_nothing_for_a_repair_that_is_over(people):
    incident = repaired_incident(flagger=people.lead)
    count = incident.compensation_items.count()
    assert draft_ahead_task(incident.pk) is False and draft_ahead_task(10**9) is False
    assert incident.compensation_items.count() == count


def test_a_broker_that_refuses_the_helper_tasks_does_not_fail_the_repair(people, monkeypatch):
    from kombu.exceptions import OperationalError

    from repairs import tasks

    def refuse(*args, **kwargs):
        raise OperationalError("broker down")

    monkeypatch.setattr(tasks.record_baseline_task, "apply_async", refuse)
    monkeypatch.setattr(tasks.draft_ahead_task, "apply_async", refuse)
    incident = repaired_incident(flagger=people.lead)
    assert incident.status == "repaired", incident.error
    assert incident.compensations == 10
