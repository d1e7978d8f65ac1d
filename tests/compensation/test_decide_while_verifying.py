"""Decisions wait only for what they need: a repair's items are drafted from its checkpointed plan, so
once the plan is applied (the incident is verifying) a reviewer may decide them; nothing leaves the
building before the verification came out 0 / 0 / 0 (compensation.delivery.gates)."""
import pytest

from compensation.delivery import gates
from compensation.delivery.execution import execute_item
from compensation.models import CompensationItem
from compensation.review.services import DecisionRefused, approve_item
from provenance.models import LedgerEntry
from repairs import job
from repairs.job import run_repair
from repairs.models import Incident
from repairs.tasks import draft_ahead_task
from tests.helpers import repaired_incident

pytestmark = pytest.mark.django_db


def _stopped_after_apply(people, monkeypatch, *, phase: str) -> Incident:
    """The canonical repair walked, checkpointed and applied, stopped there: `repairing` in `phase`,
    its items drafted by an idle worker, its verification not made."""
    def stop(incident):
        raise RuntimeError("stopped before verification")

    monkeypatch.setattr(job, "verify_and_draft", stop)
    incident = repaired_incident(flagger=people.lead)
    monkeypatch.undo()
    Incident.objects.filter(pk=incident.pk).update(status="repairing", phase=phase, error="")
    assert draft_ahead_task(incident.pk) is True
    return Incident.objects.get(pk=incident.pk)


def _reversal(incident: Incident) -> CompensationItem:
    return incident.compensation_items.get(kind=CompensationItem.Kind.REFUND_REVERSAL, ticket_id="t05")


def _paid(item: CompensationItem) -> int:
    item.refresh_from_db()
    return LedgerEntry.objects.filter(idempotency_key=item.execution_key).count() if item.execution_key else 0


def test_an_item_is_decided_while_the_repair_is_verified_and_goes_out_once_it_is_clean(
        people, monkeypatch, eager_celery, django_capture_on_commit_callbacks):
    incident = _stopped_after_apply(people, monkeypatch, phase=Incident.Phase.VERIFYING)
    item = _reversal(incident)
    with django_capture_on_commit_callbacks(execute=True):
        assert approve_item(item=item, actor=people.reviewer, reason="matches", via="admin").status == "approved"
    assert execute_item(item_id=item.pk).status == "approved" and _paid(item) == 0  # waits for verification
    assert "waits for the repair's verification" in gates.execution_wait(incident)
    Incident.objects.filter(pk=incident.pk).update(status="blocked")
    with django_capture_on_commit_callbacks(execute=True):
        incident = run_repair(incident_id=incident.pk)  # the job verifies, finishes and enqueues the approval
    assert incident.status == "repaired" and [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    item.refresh_from_db()
    assert item.status == "executed" and _paid(item) == 1
    assert execute_item(item_id=item.pk).status == "executed" and _paid(item) == 1  # exactly once


def test_items_are_not_decided_while_the_plan_is_still_being_applied(people, monkeypatch):
    incident = _stopped_after_apply(people, monkeypatch, phase=Incident.Phase.APPLYING)
    with pytest.raises(DecisionRefused, match="once its repair is applied"):
        approve_item(item=_reversal(incident), actor=people.reviewer, reason="too early", via="admin")


def test_a_repair_whose_verification_found_differences_executes_nothing(people, monkeypatch):
    incident = _stopped_after_apply(people, monkeypatch, phase=Incident.Phase.VERIFYING)
    item = _reversal(incident)
    approve_item(item=item, actor=people.reviewer, reason="matches", via="admin")
    Incident.objects.filter(pk=incident.pk).update(status="repaired",
                                                   verification={"facts": 0, "decisions": 1, "effects": 2, "rows": []})
    assert execute_item(item_id=item.pk).status == "approved" and _paid(item) == 0
    assert "found differences" in gates.execution_wait(Incident.objects.get(pk=incident.pk))
    # The gate's red case: the same item goes out once the verification is clean.
    Incident.objects.filter(pk=incident.pk).update(verification={"facts": 0, "decisions": 0, "effects": 0, "rows": []})
    assert execute_item(item_id=item.pk).status == "executed" and _paid(item) == 1


def test_items_are_drafted_and_decidable_before_the_verification_replay_starts(people, monkeypatch, settings):
    # One worker and no helpers: the order of the job's chores alone decides when items appear. With
    # verification first this sees no items (they would wait behind the whole-desk replay).
    settings.KINTSUGI_REPAIR_HELPERS = False
    seen = {}
    verify = job.verify_incident

    def verify_incident(incident, **kw):
        current = Incident.objects.get(pk=incident.pk)
        seen.update(items=current.compensation_items.count(), decidable=gates.decidable(current))
        return verify(incident, **kw)

    monkeypatch.setattr(job, "verify_incident", verify_incident)
    incident = repaired_incident(flagger=people.lead)
    assert incident.status == "repaired", incident.error
    assert seen == {"items": incident.compensation_items.count(), "decidable": True} and seen["items"] == 10
