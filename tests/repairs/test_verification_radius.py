"""Verification in proportion to the damage: the repair's own check re-runs only what the flagged source
could change and checks the boundary around it; the whole-desk replay stays on demand. Both agree on the
canonical desk and on the walk's shapes, and a repair broken inside the set, or just outside it, is
caught by the incremental check."""
import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.services import desk_run
from repairs import deep_check, job
from repairs.engine import RepairWalk
from repairs.models import Incident
from tests.helpers import flag_and_repair

pytestmark = pytest.mark.django_db(transaction=True)


def _radius_then_full(workspace: str, source: str = POISONED_PAGE) -> tuple[Incident, dict]:
    incident = flag_and_repair(workspace, source)
    full = deep_check.verify_full(incident=incident, actor=None, reason="both checks agree", via="cli")
    incident.refresh_from_db()
    return incident, full


def test_the_canonical_repair_is_verified_in_proportion_and_the_full_replay_agrees(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="vr-canon")
    incident, full = _radius_then_full("vr-canon")
    v = incident.verification
    assert incident.status == "repaired", (v["rows"], v["boundary"], v["set_size"], v["actions_rerun"])
    assert incident.blast_radius == 25
    assert incident.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                               "superseded": 8, "new": 4}
    assert [v[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert v["scope"] == "radius" and v["boundary"]["outside"]["actions"] > 0
    # The set is the radius and what it handed off: far fewer actions than the 66 of the whole desk.
    assert 0 < v["actions_rerun"] < full["actions_rerun"]
    assert [full[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
