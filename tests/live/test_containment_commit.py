"""The containment's marks follow the flag's commit: a flag whose transaction fails (its commit included)
leaves no version contained by an incident that does not exist, and a flag inside a caller's transaction
marks only once that transaction commits."""
from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from provenance.recording import containment

from provenance.graph import containment_queries as cq
from provenance.graph.graph import workspace_graph
from provenance.models import Containment, HeldEffect
from provenance.recording.services import desk_run
from repairs.job import run_repair
from repairs.models import Incident
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)
MARKED = "MATCH (f:Fact) WHERE f.contained IS NOT NULL RETURN count(f)"


def _marked(workspace: str) -> int:
    return workspace_graph(workspace).ro_query(MARKED)[0][0]


def test_a_flag_whose_commit_fails_leaves_no_marks(monkeypatch):
    desk_run(workspace="cc-fail")
    real = containment.contain
    seen = {}

    def contain_then_doom_the_commit(**kw):
        row = real(**kw)
        seen["marked"] = _marked("cc-fail")
        # A deferred foreign key to a workspace that does not exist: Postgres refuses it at COMMIT,
        # after the marks are in the graph.
        HeldEffect.objects.create(workspace_id=10**12, incident_id=kw["incident_id"], run_number=1, effect_id=1,
                                  action_id=1, kind="refund")
        return row

    monkeypatch.setattr(containment, "contain", contain_then_doom_the_commit)
    with pytest.raises(IntegrityError):
        open_incident("cc-fail")
    assert seen["marked"] > 0  # the marks were written in the flag's transaction...
    assert not Incident.objects.filter(workspace__name="cc-fail").exists()
    assert _marked("cc-fail") == 0  # ...and followed its commit out


def test_a_flag_inside_a_callers_transaction_marks_only_once_it_commits():
    desk_run(workspace="cc-outer")
    with pytest.raises(RuntimeError), transaction.atomic():
        open_incident("cc-outer")
        assert _marked("cc-outer") == 0  # not before the caller's commit
        raise RuntimeError("the caller's transaction fails")
    assert _marked("cc-outer") == 0 and not Incident.objects.exists()
    with transaction.atomic():
        incident = open_incident("cc-outer")
    row = Containment.objects.get(incident_id=incident.pk)
    assert row.contained_at is not None and row.facts == _marked("cc-outer") > 0


def test_the_next_repair_lifts_marks_left_by_a_flag_that_never_committed():
    desk_run(workspace="cc-orphan")
    graph = workspace_graph("cc-orphan")
    # As a flag whose process died between its marks and its commit leaves them: an incident id with no row.
    graph.query("MATCH (f:Fact {key: 'vip_rules'}) SET f.contained = [987654]")
    assert _marked("cc-orphan") > 0
    incident = run_repair(incident_id=open_incident("cc-orphan").pk)
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert graph.ro_query("MATCH (f:Fact) WHERE 987654 IN f.contained RETURN count(f)")[0][0] == 0
    assert graph.ro_query(cq.CONTAINED_COUNT, {"incident": incident.pk})[0].n == 0
