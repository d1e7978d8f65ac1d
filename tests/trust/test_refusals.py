"""Refusals land on the actor's own record, throttled per actor: an outsider retrying another team's
incident twenty times used to add twenty `refused` rows to that team's chain."""
from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.audit.chains import chain_events
from core.roles import SUPPORT_LEAD
from provenance.models import Workspace
from repairs.models import Incident
from tests.helpers import api_key, create_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    """The refusal budget's clock, held at the start of one minute however slow the machine is."""
    from provenance.access import refusals

    now = [1_000_000 * 60.0]
    monkeypatch.setattr(refusals.time, "time", lambda: now[0])
    return now


@pytest.fixture
def teams(settings, clock):
    settings.KINTSUGI_REFUSALS_PER_MINUTE = 5
    a, b = Workspace.objects.create(name="refuse-a"), Workspace.objects.create(name="refuse-b")
    b_lead = create_user("refuse-b-lead", SUPPORT_LEAD, workspaces=[b])
    a_member = create_user("refuse-a-member", workspaces=[a])  # no role: the retry is refused with 403
    a_lead = create_user("refuse-a-lead", SUPPORT_LEAD, workspaces=[a])  # a lead: B's incident is a 404
    for user in (a_member, a_lead):
        Token.objects.create(user=user)
    incidents = {ws.name: Incident.objects.create(workspace=ws, run_number=1, source_id="x/y", reason="r",
                                                  flagged_by=b_lead, flagged_via="cli", status="failed")
                 for ws in (a, b)}
    return a, b, a_member, a_lead, incidents


def _retry(user, incident) -> int:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
    return client.post(f"/api/v1/incidents/{incident.pk}/retry/", {"reason": "again"}, format="json").status_code


def test_an_outsider_cannot_grow_another_teams_chain(teams):
    a, b, a_member, a_lead, incidents = teams
    before_b = chain_events(b).count()
    for _ in range(20):
        assert _retry(a_member, incidents["refuse-b"]) == 403
    for _ in range(3):
        assert _retry(a_lead, incidents["refuse-b"]) == 404
    assert _retry(None, incidents["refuse-b"]) in (401, 403)
    assert chain_events(b).count() == before_b, "an outsider's attempts were written to the target's chain"
    mine = chain_events(a).filter(action="refused")
    assert mine.filter(actor=a_member).count() == 5, "the refusals are not on the actor's own chain, throttled"
    assert mine.filter(actor=a_lead).count() == 3
    assert not mine.exclude(incident_id=None).exists(), "another team's incident is linked from A's record"
    assert chain_events(None).filter(action="refused", actor=None).count() == 1  # the anonymous one


def test_a_refusal_inside_the_actors_own_workspace_is_on_its_chain_with_the_incident(teams):
    a, b, a_member, a_lead, incidents = teams
    assert _retry(a_member, incidents["refuse-a"]) == 403
    row = chain_events(a).get(action="refused")
    assert row.incident_id == incidents["refuse-a"].pk and row.actor == a_member


def test_beyond_the_budget_refusals_are_counted_and_the_next_row_says_how_many(teams, clock):
    a, b, a_member, a_lead, incidents = teams
    now = clock
    for _ in range(12):
        _retry(a_member, incidents["refuse-b"])
    assert chain_events(a).filter(action="refused").count() == 5
    now[0] += 60
    _retry(a_member, incidents["refuse-b"])
    newest = chain_events(a).filter(action="refused").order_by("-seq").first()
    assert newest.data["unrecorded_before"] == 7
    assert chain_events(a).filter(action="refused").count() == 6


def test_refusals_counted_in_a_flood_are_reported_after_a_quiet_minute(teams, clock):
    """The red case: the count lived one minute; a flood, a quiet minute, then one more refusal wrote a row
    with no `unrecorded_before` at all."""
    a, b, a_member, a_lead, incidents = teams
    for _ in range(12):
        _retry(a_member, incidents["refuse-b"])
    clock[0] += 180  # two quiet minutes
    _retry(a_member, incidents["refuse-b"])
    rows = chain_events(a).filter(action="refused", actor=a_member).order_by("-seq")
    assert rows.count() == 6 and rows[0].data["unrecorded_before"] == 7
    _retry(a_member, incidents["refuse-b"])  # reported once, not again
    assert "unrecorded_before" not in chain_events(a).filter(action="refused").order_by("-seq")[0].data


def test_refusals_counted_late_in_the_same_minute_reach_the_next_written_row(teams, clock):
    a, b, a_member, a_lead, incidents = teams
    for _ in range(8):
        _retry(a_member, incidents["refuse-b"])
    clock[0] += 60
    for _ in range(9):
        _retry(a_member, incidents["refuse-b"])
    clock[0] += 60
    _retry(a_member, incidents["refuse-b"])
    reported = [r.data.get("unrecorded_before", 0) for r in chain_events(a).filter(action="refused")]
    assert sum(reported) == 3 + 4, f"{reported}: every refusal beyond the budget is reported exactly once"
