"""FalkorDB killed while a recording commits: the graph applied the write (its append-only file keeps it)
but the answer was lost, so Postgres rolls the recording back and the discard cannot reach the graph.
The restarted server replays the write: an orphan root with no Postgres rows. What the discard owed is
kept (provenance.graph_debts) and paid before the graph is next written or walked, or by the sweep."""
from __future__ import annotations

import socket
import time

import pytest

from core import embedded
from provenance.recording import recorder
from provenance.graph.graph import GraphUnavailable, ping, server_key, workspace_graph
from provenance.models import GraphDebt, LedgerEntry, Ticket, Workspace
from provenance.recording.services import desk_run, record_root
from repairs.job import run_repair
from repairs.models import Incident
from repairs.outages import heal_outages
from tests.helpers import open_incident

WS = "ops-orphans"
ROOTS = "MATCH (a:Action) WHERE a.root AND a.ticket = $ticket RETURN count(a)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def killable(tmp_path, settings, falkordb_url):
    """A FalkorDB server of its own for the workspace, to kill and start again on its data."""
    port, data = _free_port(), tmp_path / "falkordb"
    state = {"proc": embedded.start_redis_server(data_dir=data, port=port, with_graph=True, die_with_parent=True)}
    url = embedded.server_url(port)
    settings.KINTSUGI_FALKORDB_URLS = [falkordb_url, url]
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 1.0

    def kill():
        state["proc"].kill()
        state["proc"].wait(timeout=20)

    def restart():
        state["proc"] = embedded.start_redis_server(data_dir=data, port=port, with_graph=True, die_with_parent=True)
        for _ in range(200):  # it replays its append-only file before it answers
            try:
                return ping(server=server_key(url))
            except GraphUnavailable:
                time.sleep(0.1)
        raise AssertionError("the restarted FalkorDB never answered")

    Workspace.objects.create(name=WS, falkordb_server=server_key(url))
    yield {"kill": kill, "restart": restart}
    state["proc"].kill()
    state["proc"].wait(timeout=20)


def _answer_lost_once(monkeypatch, kill):
    """The commit's flush is applied by the graph, then the server dies before it answers."""
    flush = recorder.GraphRecorder.flush

    def applied_then_killed(session):
        monkeypatch.setattr(recorder.GraphRecorder, "flush", flush)
        flush(session)
        kill()
        raise GraphUnavailable("FalkorDB closed the connection before answering")
    monkeypatch.setattr(recorder.GraphRecorder, "flush", applied_then_killed)


def _graph_actions() -> int:
    return workspace_graph(WS).ro_query("MATCH (a:Action) RETURN count(a)")[0][0]


def _fail_one_recording(monkeypatch, killable) -> tuple[dict, int]:
    desk_run(workspace=WS)
    ticket = Ticket.objects.filter(workspace__name=WS).order_by("ticket_id").first()
    ledger = LedgerEntry.objects.count()
    _answer_lost_once(monkeypatch, killable["kill"])
    with pytest.raises(GraphUnavailable):
        record_root(workspace=WS, agent="triage", payload=ticket.as_payload())
    assert LedgerEntry.objects.count() == ledger  # Postgres rolled it back
    killable["restart"]()
    # The restarted server replayed the write: the orphan is there, nothing in Postgres says so.
    assert workspace_graph(WS).ro_query(ROOTS, {"ticket": ticket.ticket_id})[0][0] == 2
    return ticket.as_payload(), ledger


@pytest.mark.django_db(transaction=True)
def test_the_retried_root_commits_beside_no_orphan_of_the_lost_answer(killable, monkeypatch):
    payload, ledger = _fail_one_recording(monkeypatch, killable)
    ids = record_root(workspace=WS, agent="triage", payload=payload)
    graph = workspace_graph(WS)
    # The desk's root of the ticket and the retried one; the orphan was deleted before the retry numbered.
    assert graph.ro_query(ROOTS, {"ticket": payload["ticket"]})[0][0] == 2
    assert _graph_actions() == Workspace.objects.get(name=WS).action_count
    assert min(ids) == graph.ro_query("MATCH (a:Action) WHERE a.root AND a.ticket = $t RETURN max(a.id)",
                                      {"t": payload["ticket"]})[0][0]
    assert not GraphDebt.objects.exists()
    assert LedgerEntry.objects.count() > ledger


@pytest.mark.django_db(transaction=True)
def test_the_sweep_pays_the_orphan_once_the_graph_answers(killable, monkeypatch):
    _fail_one_recording(monkeypatch, killable)
    assert _graph_actions() > Workspace.objects.get(name=WS).action_count  # the orphan, before the sweep
    healed = heal_outages()
    assert _graph_actions() == Workspace.objects.get(name=WS).action_count
    assert healed.settled == (WS,)
    assert not GraphDebt.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_repair_walk_never_sees_the_orphan(killable, monkeypatch):
    payload, _ = _fail_one_recording(monkeypatch, killable)
    incident = open_incident(WS)
    count = Workspace.objects.get(name=WS).action_count
    orphan = workspace_graph(WS).ro_query("MATCH (a:Action) RETURN max(a.id)")[0][0]
    assert run_repair(incident_id=incident.pk).status == Incident.Status.REPAIRED
    assert orphan not in {o.action_id for o in incident.outcomes.all()}
    assert not GraphDebt.objects.exists()
    # Nothing of the orphan's ticket is left but the desk's own root (and what the repair re-ran of it).
    assert workspace_graph(WS).ro_query(ROOTS, {"ticket": payload["ticket"]})[0][0] == 1
    assert count <= _graph_actions()
