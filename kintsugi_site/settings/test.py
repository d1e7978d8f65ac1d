"""Test settings: the machine's Postgres and Redis (CI has both on loopback); FalkorDB is started by the
test fixtures (tests/conftest.py) and handed over through FALKORDB_URL."""
import os

os.environ.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/5")

from .base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
KINTSUGI_GRAPH_PREFIX = os.environ.get("KINTSUGI_GRAPH_PREFIX", "kstest")
# Each run's cache keys under its own prefix: runs sharing a Redis database stay apart (tests.cache).
CACHES["default"]["KEY_PREFIX"] = os.environ.get("KINTSUGI_CACHE_PREFIX", KINTSUGI_GRAPH_PREFIX)  # noqa: F405
# No collectstatic before the tests: templates resolve static paths without whitenoise's manifest.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
WHITENOISE_USE_FINDERS = True  # static files straight from the apps, as the development server would
# Tests read the topology mirror on the first question (no thread outliving a test's graphs); the
# background path has tests of its own (tests/provenance/test_mirror.py turns it on).
KINTSUGI_MIRROR_BACKGROUND = False
