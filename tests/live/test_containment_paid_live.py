"""The "paid live" figure `bench live` reports beside containment: effects performed live by a recording
that read one of the flagged source's versions between the flag and the apply. 0 with containment; the
baseline (the flag's marks taken off at once) counts the refund and its email, which is the red case;
with containment the same two are held for the repair."""
import pytest

from bench.containment import figures, paid, poisoned_versions, uncontain
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.recording.live import SnapshotRecording
from provenance.models import Workspace
from provenance.recording.services import desk_run
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)


def _record_vip(workspace: str) -> list[int]:
    ws = Workspace.objects.get(name=workspace)
    payload = next(t.as_payload() for t in ws.tickets.order_by("ticket_id") if "vip" in t.body.lower())
    recording = SnapshotRecording(ws)
    recording.run("triage", payload)
    return recording.commit()


@pytest.mark.parametrize("contained", [True, False])
def test_paid_live_is_zero_with_containment_and_counts_the_refund_without_it(contained):
    name = f"cpaid-{'on' if contained else 'off'}"
    desk_run(workspace=name)
    graph = workspace_graph(name)
    poisoned = poisoned_versions(graph, POISONED_PAGE)
    assert len(poisoned) == 1  # vip_rules as the page rewrote it
    incident = open_incident(name)
    if not contained:
        uncontain(name, incident.pk)
    effects, cents = paid(graph, _record_vip(name), poisoned)
    held = figures([incident.pk])
    if contained:
        assert (effects, cents) == (0, 0) and held["still_held"] == 2  # held for the repair instead
        assert held["seconds"] and held["p50_s"] < 2
    else:
        assert effects == 2 and cents > 0  # the full refund and its email left live
