"""A FalkorDB server that freezes (SIGSTOP: it holds its port and never answers) is an outage of any
length: repairs on it block and resume, never fail; the sweep reports it and goes on; and no client
starts a second server on the port the frozen one holds."""
from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from core import embedded
from provenance.graph.graph import GraphUnavailable, ping, server_key
from provenance.models import Workspace
from provenance.recording.services import desk_run
from repairs.job import run_repair
from repairs.models import Incident
from repairs.outages import heal_outages
from tests.helpers import open_incident


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def frozen(tmp_path):
    port = _free_port()
    proc = embedded.start_redis_server(data_dir=tmp_path / "frozen", port=port, with_graph=True, die_with_parent=True)
    state = {"stopped": False}

    def freeze():
        os.kill(proc.pid, signal.SIGSTOP)
        state["stopped"] = True

    def thaw():
        os.kill(proc.pid, signal.SIGCONT)
        state["stopped"] = False
    yield {"proc": proc, "port": port, "url": embedded.server_url(port), "freeze": freeze, "thaw": thaw}
    if state["stopped"]:
        thaw()
    proc.terminate()
    proc.wait(timeout=20)


def test_no_second_server_is_started_on_a_port_a_frozen_one_holds(frozen, tmp_path):
    frozen["freeze"]()
    start = time.monotonic()
    with pytest.raises(embedded.ServerUnresponsive, match="does not answer"):
        embedded.start_redis_server(data_dir=tmp_path / "second", port=frozen["port"], with_graph=True,
                                    die_with_parent=True)
    assert time.monotonic() - start < 5
    assert not (tmp_path / "second").exists()  # nothing was prepared for a second server
    frozen["thaw"]()
    assert embedded.start_redis_server(data_dir=tmp_path / "second", port=frozen["port"], with_graph=True) is None


@pytest.mark.django_db
def test_a_repair_on_a_frozen_server_blocks_and_resumes_never_fails(frozen, settings, falkordb_url):
    settings.KINTSUGI_FALKORDB_URLS = [falkordb_url, frozen["url"]]
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 1.0
    Workspace.objects.create(name="ops-frozen", falkordb_server=server_key(frozen["url"]))
    desk_run(workspace="ops-frozen")
    incident = open_incident("ops-frozen")
    frozen["freeze"]()
    with pytest.raises(GraphUnavailable):
        ping(server=server_key(frozen["url"]))
    for _ in range(3):  # the task's retries: each blocks again, none fails
        with pytest.raises(GraphUnavailable):
            run_repair(incident_id=incident.pk)
        incident.refresh_from_db()
        assert incident.status == Incident.Status.BLOCKED, incident.error
    assert "FalkorDB" in incident.error
    healed = heal_outages()  # the sweep does not crash on the frozen server; it reports it
    assert healed.graph_error and str(frozen["port"]) in healed.graph_error
    assert incident.pk not in healed.unblocked
    frozen["thaw"]()
    assert run_repair(incident_id=incident.pk).status == Incident.Status.REPAIRED
