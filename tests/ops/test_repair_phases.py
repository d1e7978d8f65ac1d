"""How long a repair spends in each phase: in /metrics, the incident's API representation and (through
incident_summary) the CLI's and MCP's."""
from __future__ import annotations

import re

import pytest

from core.roles import SUPPORT_LEAD
from provenance.recording.services import desk_run, get_workspace
from repairs.models import IncidentPhase
from tests.helpers import client_for, flag_and_repair, flagger

pytestmark = pytest.mark.django_db

TIMED = ("walking", "applying", "verifying")


def _phase_figures(text: str) -> dict[str, tuple[float, float]]:
    """{phase: (count, sum)} of kintsugi_repair_phase_seconds in a Prometheus text."""
    found: dict[str, dict[str, float]] = {}
    for kind, phase, value in re.findall(r'^kintsugi_repair_phase_seconds_(count|sum)\{phase="(\w+)"\} (\S+)$', text,
                                         re.M):
        found.setdefault(phase, {})[kind] = float(value)
    return {phase: (v["count"], v["sum"]) for phase, v in found.items()}


@pytest.fixture
def repaired(make_user):
    desk_run(workspace="ops-phases")
    lead = make_user("phases-lead", roles=[SUPPORT_LEAD], workspaces=[get_workspace("ops-phases")])
    return flag_and_repair("ops-phases", actor=flagger()), lead


def test_a_repair_shows_its_phase_durations_in_the_metrics(client, repaired):
    figures = _phase_figures(client.get("/metrics").content.decode())
    assert set(figures) == set(TIMED), figures
    for phase in TIMED:
        count, seconds = figures[phase]
        assert count >= 1 and seconds > 0, (phase, figures)


def test_phases_without_their_next_mark_count_in_no_summary(client, repaired):
    """A phase lasts until the next one starts: with the verification's end (done) missing, the
    verification has no duration, and the phases before it still count."""
    incident, _ = repaired
    before = _phase_figures(client.get("/metrics").content.decode())
    IncidentPhase.objects.filter(incident=incident, phase="done").delete()
    after = _phase_figures(client.get("/metrics").content.decode())
    assert after["verifying"][0] == before["verifying"][0] - 1
    assert after["walking"] == before["walking"] and after["applying"] == before["applying"]


def test_the_incident_api_gives_each_phase_its_start_and_seconds(repaired):
    incident, lead = repaired
    body = client_for(lead).get(f"/api/v1/incidents/{incident.pk}/").json()
    timings = body["timings"]
    assert list(timings) == list(TIMED), timings
    assert all(timings[p]["seconds"] > 0 for p in TIMED), timings
    assert timings["walking"]["started_at"] < timings["applying"]["started_at"] < timings["verifying"]["started_at"]
    listed = client_for(lead).get("/api/v1/incidents/").json()["results"]
    assert [i["timings"] for i in listed if i["id"] == incident.pk] == [timings]
