"""A checkpointed plan's steps live in their own table (one jsonb value holds at most 256 MB, which a
million-action repair's steps outgrow), and a plan checkpointed before that, steps inline, still applies."""
import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import GraphUnavailable
from provenance.recording.services import desk_run
from repairs import job
from repairs.models import Incident, RepairStep
from repairs.steps import STEP_ORDER
from tests.helpers import flag_and_repair, open_incident, verification_outcome

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_plan_keeps_its_steps_in_their_table_in_apply_order():
    desk_run(workspace="steps")
    incident = flag_and_repair("steps")
    assert incident.status == Incident.Status.REPAIRED
    incident.refresh_from_db()
    assert "steps" not in incident.plan and incident.plan["step_count"] > 0
    steps = list(incident.steps.order_by("index").values_list("index", "kind"))
    assert [i for i, _ in steps] == list(range(incident.plan["step_count"]))
    kinds = [k for _, k in steps]
    assert kinds == sorted(kinds, key=STEP_ORDER.index)
    assert incident.applied_steps == incident.plan["step_count"]


def test_a_plan_checkpointed_with_its_steps_inline_resumes_and_verifies_clean(monkeypatch):
    desk_run(workspace="reference")
    reference = flag_and_repair("reference")
    desk_run(workspace="legacy")
    incident = open_incident("legacy")

    def down(graph, step):
        raise GraphUnavailable("FalkorDB went away before the first step")

    monkeypatch.setattr(job, "apply_step", down)
    with pytest.raises(GraphUnavailable):
        job.run_repair(incident_id=incident.pk)
    monkeypatch.undo()
    # Rewrite the checkpoint as an older version stored it: the steps inside the plan, no table rows.
    incident.refresh_from_db()
    plan = dict(incident.plan)
    plan["steps"] = [[kind, rows] for kind, rows in incident.steps.order_by("index").values_list("kind", "rows")]
    del plan["step_count"]
    RepairStep.objects.filter(incident=incident).delete()
    Incident.objects.filter(pk=incident.pk).update(plan=plan)

    resumed = job.run_repair(incident_id=incident.pk)
    assert resumed.status == Incident.Status.REPAIRED
    resumed.refresh_from_db()
    assert resumed.applied_steps == len(plan["steps"]) and not resumed.steps.exists()
    assert reference.verification is not None
    assert verification_outcome(resumed.verification) == verification_outcome(reference.verification)
    assert resumed.counts == reference.counts
