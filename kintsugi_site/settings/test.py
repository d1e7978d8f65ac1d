"""Test settings: DATABASE_URL and CELERY_BROKER_URL when set; else the machine's Postgres and Redis on
their loopback defaults when they answer (CI has both), else the embedded Postgres and broker `make demo`
uses (core.embedded), started if need be. FalkorDB is started by the test fixtures (tests/conftest.py)
and handed over through FALKORDB_URL. See docs/testing.md."""
import os

from core import embedded

DEFAULT_SERVICES = {"DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/test",
                    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/5"}
# Chosen once, by the first process that loads these settings (pytest-xdist's controller, before it starts
# its workers), and exported: the workers and every process the tests start inherit the choice and
# probe nothing. The two probes cost about 10 ms (a Postgres forks a backend to answer one).
os.environ.update(embedded.local_services(defaults=DEFAULT_SERVICES, environ=os.environ))

from .base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Under pytest-xdist each worker (PYTEST_XDIST_WORKER: gw0, gw1, ...) is a run of its own beside the
# others: its graphs, cache keys and broker keys carry its id. The processes a worker starts inherit the
# variable and so land beside it.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_PER_WORKER = f"-{_XDIST_WORKER}" if _XDIST_WORKER else ""
_RUN = os.environ.get("KINTSUGI_GRAPH_PREFIX", "kstest")
KINTSUGI_GRAPH_PREFIX = _RUN + _PER_WORKER
# Each run's cache keys under its own prefix: runs sharing a Redis database stay apart (tests.cache).
CACHES["default"]["KEY_PREFIX"] = os.environ.get("KINTSUGI_CACHE_PREFIX", _RUN) + _PER_WORKER  # noqa: F405
if _XDIST_WORKER:
    # Every key of the broker (queues, unacknowledged messages, bindings) under the worker's prefix: two
    # workers' Celery processes on one Redis database never take each other's tasks. The broker's socket
    # deadlines stay: without them a frozen broker holds a sender forever.
    CELERY_BROKER_TRANSPORT_OPTIONS = {**CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
                                       "global_keyprefix": f"{KINTSUGI_GRAPH_PREFIX}:"}
# Execution at once unless a test opens an undo window of its own (tests of the window set it).
KINTSUGI_UNDO_SECONDS = int(os.environ.get("KINTSUGI_UNDO_SECONDS", "0"))
# No collectstatic before the tests: templates resolve static paths without whitenoise's manifest.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
WHITENOISE_USE_FINDERS = True  # static files straight from the apps, as the development server would
# Each looked up when asked for, as in development: otherwise every test client's middleware lists every
# app's static files when it starts: 20 ms a client, and most tests make one.
WHITENOISE_AUTOREFRESH = True
# Tests read the topology mirror on the first question (no thread outliving a test's graphs); the
# background path has tests of its own (tests/provenance/test_mirror.py turns it on).
KINTSUGI_MIRROR_BACKGROUND = False
