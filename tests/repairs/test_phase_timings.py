"""When a repair entered each phase survives its resumption, and the durations read from the marks."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import GraphUnavailable
from provenance.recording.services import desk_run
from repairs import phases
from repairs.job import run_repair
from repairs.models import Incident, IncidentPhase
from repairs.services import retry_incident
from tests.helpers import flagger, open_incident

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_each_phase_lasts_until_the_next_one_entered_and_the_current_one_has_no_duration():
    marks = {"walking": T0, "applying": T0 + timedelta(seconds=3), "verifying": T0 + timedelta(seconds=4)}
    assert phases.durations(marks) == {"walking": 3.0, "applying": 1.0, "verifying": None}
    assert phases.durations({**marks, "done": T0 + timedelta(seconds=6)})["verifying"] == 2.0
    # A repair resumed from a plan checkpointed before phases were marked: it starts at applying.
    assert phases.durations({"applying": T0, "done": T0 + timedelta(seconds=5)}) == {"applying": 5.0}


@pytest.mark.django_db(transaction=True)
def test_a_repair_resumed_after_an_outage_keeps_the_first_attempts_phase_marks(own_falkordb):
    stop, start, _ = own_falkordb
    desk_run(workspace="phase-resume")
    incident = open_incident("phase-resume", POISONED_PAGE)
    stop()
    with pytest.raises(GraphUnavailable):
        run_repair(incident_id=incident.pk)
    first = IncidentPhase.objects.get(incident=incident, phase=Incident.Phase.WALKING).entered_at
    start()
    retry_incident(incident=incident, actor=flagger(), reason="graph is back", via=Incident.Via.CLI)
    incident = run_repair(incident_id=incident.pk)
    assert incident.status == Incident.Status.REPAIRED
    marks = dict(IncidentPhase.objects.filter(incident=incident).values_list("phase", "entered_at"))
    assert marks[Incident.Phase.WALKING] == first
    assert first < marks["applying"] < marks["verifying"] < marks["done"]
    # The walk's duration counts the outage it waited through, from the first attempt on.
    assert phases.timings(incident)["walking"]["seconds"] == (marks["applying"] - first).total_seconds()
