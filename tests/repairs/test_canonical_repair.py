import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run
from repairs.engine import RepairWalk
from tests.helpers import flag_and_repair

pytestmark = pytest.mark.django_db(transaction=True)


_flag_and_repair = flag_and_repair


def test_canonical_repair_matches_the_article(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="rep")
    desk_run(workspace="rep-clean", exclude_source=POISONED_PAGE)
    incident = _flag_and_repair("rep")
    assert incident.status == "repaired"
    assert incident.blast_radius == 25
    assert incident.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                               "superseded": 8, "new": 4}
    kinds = sorted(e.kind for e in incident.effects.filter(role="invalidated"))
    assert kinds == ["email"] * 5 + ["refund"] * 5
    assert {k: incident.verification[k] for k in ("facts", "decisions", "effects")} == {
        "facts": 0, "decisions": 0, "effects": 0}
    assert export_state(workspace="rep") == export_state(workspace="rep-clean")


def test_broken_repair_without_supersession_shows_a_verification_diff(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="broken")
    # The red case of the verification gate: a walk that forgets to supersede stale handoffs.
    monkeypatch.setattr(RepairWalk, "_supersede", lambda self, aid: None)
    incident = _flag_and_repair("broken")
    v = incident.verification
    assert v["decisions"] == 0  # triage decisions are re-run either way
    assert v["effects"] > 0  # but the superseded refunds and emails stay live
    assert any(r["table"] == "effects" and r["side"] == "repaired" for r in v["rows"])
