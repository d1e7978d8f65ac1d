"""The embedded Redis-protocol servers demand a password generated once under KINTSUGI_HOME; their files
are private; the suite's own FalkorDB uses it too and dies with the process that started it."""
import os
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import redis

from core import embedded
from tests.helpers import ROOT, free_port
from tests.processes import leftover_children


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("KINTSUGI_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_server_refuses_clients_without_the_generated_password(home):
    port = free_port()
    proc = embedded.start_redis_server(data_dir=home / "broker", port=port, with_graph=False)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(port=port, retry=embedded.no_retries()).ping()
        url = embedded.server_url(port, db=0)
        password = (home / "secrets" / "redis-password").read_text().strip()
        assert url == f"redis://:{password}@127.0.0.1:{port}/0" and len(password) >= 40
        client = redis.Redis.from_url(url)
        client.set("k", "v")
        client.save()
        assert embedded.server_password() == password  # generated once, then kept
        assert _mode(home / "secrets") == 0o700 and _mode(home / "secrets" / "redis-password") == 0o600
        assert _mode(home / "broker") == 0o700
        files = [p for p in (home / "broker").rglob("*") if p.is_file()]
        assert files and all(_mode(p) & 0o077 == 0 for p in files), {p.name: oct(_mode(p)) for p in files}
        assert password not in " ".join(psutil.Process(proc.pid).cmdline())  # not on the command line
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_port_held_by_another_homes_server_is_refused_with_its_reason(home, tmp_path):
    """Red case: the demo once attached to another home's broker and its worker failed to log in for ever."""
    port = free_port()
    other = embedded.start_redis_server(data_dir=tmp_path / "other", port=port, with_graph=False, password="other")
    try:
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} is held by a server that refuses") as caught:
            embedded.start_redis_server(data_dir=home / "broker", port=port, with_graph=False)
        assert embedded.server_password() not in str(caught.value)
        assert embedded.start_redis_server(data_dir=tmp_path / "other", port=port, with_graph=False,
                                           password="other") is None  # its own home attaches
    finally:
        other.terminate()
        other.wait(timeout=10)


def test_the_suites_falkordb_demands_the_password_too(falkordb_url):
    from urllib.parse import urlsplit

    parts = urlsplit(falkordb_url)
    assert parts.password
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host=parts.hostname, port=parts.port, retry=embedded.no_retries()).ping()
    assert redis.Redis.from_url(falkordb_url).ping()


def test_a_test_server_dies_with_a_killed_parent(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from core import embedded
        proc = embedded.start_redis_server(data_dir=Path({str(tmp_path / 'data')!r}), port={free_port()},
                                           with_graph=False, password="p", die_with_parent=True)
        print(proc.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    server = int(parent.stdout.readline())
    assert psutil.pid_exists(server)
    parent.kill()  # SIGKILL: no atexit, no pytest_unconfigure
    parent.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the server outlived its parent"
        time.sleep(0.1)


def test_the_session_end_check_finds_a_server_left_running(tmp_path):
    proc = embedded.start_redis_server(data_dir=tmp_path / "left", port=free_port(), with_graph=False, password="p")
    try:
        assert proc.pid in leftover_children()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.pid not in leftover_children()
