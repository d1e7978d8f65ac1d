import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.services import desk_run
from repairs.models import Incident
from repairs.job import run_repair
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)

# Both pages feed the refund decisions: the tickets that read the poisoned page read the policy too.
SECOND = "acme/refund-policy"


def _verified_clean(incident: Incident) -> bool:
    return [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]


@pytest.mark.parametrize("round_", range(10))
def test_overlapping_incidents_flagged_at_once_verify_against_what_each_excluded(round_, settings):
    # Half the rounds with the repair's own check in proportion to the damage, half with the whole-desk
    # replay as every repair's verification (whose baseline must leave out what each excluded).
    settings.KINTSUGI_VERIFY_SCOPE = scope = ("radius", "full")[round_ // 5]
    name = f"both-{round_}"
    desk_run(workspace=name)
    first, second = open_incident(name, POISONED_PAGE), open_incident(name, SECOND)
    order = [first, second] if round_ % 2 == 0 else [second, first]
    for incident in order:
        run_repair(incident_id=incident.pk)
    for incident in order:
        incident.refresh_from_db()
        assert incident.status == Incident.Status.REPAIRED, incident.error
        assert _verified_clean(incident), (incident.source_id, incident.verification)
        assert incident.verification["scope"] == scope
        if scope == "full":
            # The baseline it was checked against left out its own source and those repaired before it.
            assert incident.source_id in incident.baseline_for["excluded"]
    if scope == "full":
        assert sorted(order[-1].baseline_for["excluded"]) == sorted([POISONED_PAGE, SECOND])
