"""The embedded FalkorDB, killed and started again, replays its append-only file before it answers: that
server is starting, not failed. A repair on it blocks and then resumes to repaired, the sweep reports it
without raising, and nobody starts a second server on its port. Also the sweep against an embedded
server that is frozen."""
from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from core import embedded
from provenance.graph import graph
from provenance.graph.graph import GraphUnavailable
from provenance.recording.services import desk_run
from repairs.job import run_repair
from repairs.models import Incident
from repairs.outages import heal_outages
from tests.helpers import free_port, open_incident, wait_for

# The slow load, made slow on purpose: after the kill, the incremental append-only file gets
# `CONFIG SET key-load-delay` (Redis's own facility for testing a slow load: it sleeps that many
# microseconds after each command it replays) and then SLOW_LOAD_COMMANDS small writes. The server answers
# LOADING between every 1,024 commands (every ~0.5 s at this delay) for as long as the test needs it (at
# most ~SLOW_LOAD_COMMANDS * SLOW_LOAD_DELAY_US, whatever the machine's speed); the test ends the load by
# setting the delay back to 0 (CONFIG is served while loading).
SLOW_LOAD_COMMANDS = 500_000
SLOW_LOAD_DELAY_US = 200


@pytest.fixture
def embedded_falkordb(tmp_path, monkeypatch, settings):
    """The embedded FalkorDB (no FALKORDB_URL: clients find or start it under KINTSUGI_HOME) on a port of
    the test's own."""
    port = free_port()
    monkeypatch.setenv("KINTSUGI_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(embedded, "FALKORDB_PORT", port)
    settings.FALKORDB_URL = ""
    settings.KINTSUGI_FALKORDB_URLS = []
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 2.0
    state = {"proc": embedded.start_redis_server(data_dir=embedded.kintsugi_home() / "falkordb", port=port,
                                                 with_graph=True, die_with_parent=True)}
    graph._dbs.clear()
    yield state, port
    graph._dbs.clear()
    for pid in _servers_on(port):  # started here or by a client, loading or not
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    if state["proc"] is not None:
        state["proc"].wait(timeout=20)


def _servers_on(port: int) -> list[int]:
    """The redis-server processes started for `port`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            # A running redis-server shows its address in place of its arguments.
            if argv and b"redis-server" in argv[0] and (f":{port}".encode() in argv[0] or str(port).encode() in argv):
                found.append(int(entry))
    return found


def _resp(*args: str) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))


def _slow_load_tail(data_dir) -> None:
    """Append the slow replay to the incremental append-only file of a stopped server (its manifest names
    the file: `file NAME seq N type i …`)."""
    aof = data_dir / "appendonlydir"
    entries = [dict(zip(words[::2], words[1::2])) for words in
               (line.split() for line in (aof / "appendonly.aof.manifest").read_text().splitlines())]
    incremental = [entry["file"] for entry in entries if entry.get("type") == "i"][-1]
    with open(aof / incremental, "ab") as out:
        out.write(_resp("CONFIG", "SET", "key-load-delay", str(SLOW_LOAD_DELAY_US)))
        out.write(b"".join(_resp("SET", f"slow-load:{i}", "") for i in range(SLOW_LOAD_COMMANDS)))


def _end_the_load(port: int) -> None:
    redis.Redis.from_url(embedded.server_url(port), socket_timeout=10).config_set("key-load-delay", 0)


def _loading(port: int) -> bool:
    """Up but not answering yet: LOADING, or no reply at all while it replays a long query."""
    try:
        redis.Redis.from_url(embedded.server_url(port), socket_timeout=2).ping()
    except (redis.exceptions.BusyLoadingError, redis.exceptions.TimeoutError):
        return True
    except redis.exceptions.RedisError:
        return False
    return False


@pytest.mark.django_db
def test_a_killed_falkordb_that_loads_slowly_blocks_the_repair_and_it_resumes_to_repaired(embedded_falkordb,
                                                                                          monkeypatch, settings):
    state, port = embedded_falkordb
    # A server replaying one long query gives no answer at all: the repair's call waits out its socket
    # deadline (two minutes for a worker) and would outlast the load. A short one keeps the test inside it.
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 2.0
    desk_run(workspace="ops-loading")
    incident = open_incident("ops-loading")
    time.sleep(1.5)  # appendfsync everysec: everything is in the file
    state["proc"].kill()
    state["proc"].wait(timeout=10)
    graph._dbs.clear()
    _slow_load_tail(embedded.kintsugi_home() / "falkordb")

    monkeypatch.setenv("KINTSUGI_STORE_START_WAIT_SECONDS", "0.5")
    began = time.monotonic()
    with pytest.raises(embedded.ServerStarting, match="is starting"):  # not RuntimeError: the server is loading
        state["proc"] = embedded.start_redis_server(data_dir=embedded.kintsugi_home() / "falkordb", port=port,
                                                    with_graph=True, die_with_parent=True)
    assert time.monotonic() - began < 5
    state["proc"] = None
    assert _loading(port)
    assert len(_servers_on(port)) == 1

    # Meanwhile: a second start attaches to the loading server, the repair blocks, the sweep reports it.
    try:  # attached to it (it answers LOADING), or told it does not answer (busy replaying a query)
        assert embedded.start_redis_server(data_dir=embedded.kintsugi_home() / "falkordb", port=port,
                                           with_graph=True) is None
    except embedded.ServerUnresponsive:
        pass
    assert len(_servers_on(port)) == 1
    assert _loading(port)
    with pytest.raises(GraphUnavailable):
        run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    assert incident.status == Incident.Status.BLOCKED, incident.error
    assert "FalkorDB" in incident.error
    healed = heal_outages()
    assert healed.graph_error and incident.pk not in healed.unblocked
    assert _loading(port)

    _end_the_load(port)
    wait_for(lambda: not _loading(port), timeout=120)
    assert len(_servers_on(port)) == 1  # none was started beside it
    assert run_repair(incident_id=incident.pk).status == Incident.Status.REPAIRED
    assert not incident.transitions.filter(to_status="failed").exists()


@pytest.mark.django_db
def test_the_sweep_does_not_raise_while_the_embedded_falkordb_is_frozen(embedded_falkordb):
    state, port = embedded_falkordb
    os.kill(state["proc"].pid, signal.SIGSTOP)
    try:
        graph._dbs.clear()
        healed = heal_outages()
    finally:
        os.kill(state["proc"].pid, signal.SIGCONT)
    assert healed.graph_error and str(port) in healed.graph_error
    assert healed.unblocked == [] and healed.resumed == []
