"""A second `make demo` while one serves: it says so, with the URL, and exits non-zero before migrating,
setting up the users or printing them."""
from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys

import pytest
from django.conf import settings

from tests.helpers import ROOT, database_url, free_port

pytestmark = pytest.mark.slow


def _demo(home, *, host: str = "127.0.0.1", port: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINTSUGI_")}
    env.update({"DJANGO_SETTINGS_MODULE": "kintsugi_site.settings.base", "KINTSUGI_HOME": str(home),
                # A database that does not exist: a demo that went on anyway fails at its first migration
                # instead of migrating one that does.
                "DATABASE_URL": database_url(settings.DATABASES["owner"], "kintsugi_no_such_database"),
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "FALKORDB_URL": settings.FALKORDB_URL,
                "KINTSUGI_WEB_HOST": host, "KINTSUGI_WEB_PORT": str(port)})
    return subprocess.run([sys.executable, "-m", "kintsugi_site.demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_demo_serving_from_the_same_home_is_named_with_its_url_and_pid(tmp_path):
    home, port = tmp_path / "home", free_port()
    home.mkdir()
    # What the serving demo holds: the lock under its KINTSUGI_HOME, with its pid.
    with open(home / "demo.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        done = _demo(home, port=port)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"already serves http://127.0.0.1:{port}/admin/ (pid 4242" in done.stderr
    assert "demo users" not in done.stdout and "starting services" not in done.stdout


def test_a_kintsugi_serving_on_the_web_port_is_named_with_its_url(tmp_path, live_server):
    """Another home's demo (here the test's live server, the same site) on the port: no lock to find,
    but its /healthz answers."""
    host, port = live_server.url.removeprefix("http://").rsplit(":", 1)
    done = _demo(tmp_path / "home", host=host, port=int(port))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"a kintsugi already serves http://{host}:{port}/admin/" in done.stderr
    assert "demo users" not in done.stdout


def test_another_server_on_the_web_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = _demo(tmp_path / "home", port=port)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"127.0.0.1:{port} is taken by another server" in done.stderr
    assert "demo users" not in done.stdout
