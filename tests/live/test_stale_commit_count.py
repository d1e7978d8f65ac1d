"""A commit counts its actions into the workspace's row in the statement that follows the graph's lock,
before it knows whether the recording is stale; a stale one rolls that back and runs again, so the row's
count stays the graph's."""
import pytest

from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Ticket, Workspace
from provenance.recording import live
from provenance.recording.live import SnapshotRecording
from provenance.recording.services import desk_run

pytestmark = pytest.mark.django_db(transaction=True)


def _commit_across_a_desk_run() -> tuple[int, int]:
    """A root opened and run, a desk run replacing the graph before it commits: the commit finds the run
    number changed, runs the root again on the new desk and commits. (row's count, graph's actions)"""
    desk_run(workspace="stale-count")
    ws = Workspace.objects.get(name="stale-count")
    payload = Ticket.objects.filter(workspace=ws).order_by("ticket_id").first().as_payload()
    recording = SnapshotRecording(ws)
    recording.run("triage", payload)
    desk_run(workspace="stale-count")
    ids = recording.commit()
    assert ids and recording.run_number == Workspace.objects.get(pk=ws.pk).run_number  # it ran again
    graph_actions = workspace_graph("stale-count").ro_query(queries.ACTION_COUNT)[0][0]
    return Workspace.objects.get(pk=ws.pk).action_count, graph_actions


def test_a_stale_commit_counts_nothing_and_its_rerun_counts_once():
    count, actions = _commit_across_a_desk_run()
    assert count == actions


def test_red_a_stale_commit_that_kept_its_count_is_caught(monkeypatch):
    monkeypatch.setattr(live.transaction, "set_rollback", lambda rollback, using=None: None)
    count, actions = _commit_across_a_desk_run()
    assert count > actions
