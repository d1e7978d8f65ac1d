"""Which Postgres and broker the tests use (core.embedded.choose_services, called by the test settings):
a variable that is set is kept; an unset one takes the machine's server at its loopback default when a
server of that kind answers there (CI), else the embedded server `make demo` uses."""
from __future__ import annotations

import os
import socket
import time

import pytest
from django.conf import settings

from core import embedded
from kintsugi_site.settings.test import DEFAULT_SERVICES
from tests.helpers import free_port


def _defaults(*, postgres_port: int, redis_port: int, postgres_host: str = "127.0.0.1") -> dict[str, str]:
    return {"DATABASE_URL": f"postgresql://postgres@{postgres_host}:{postgres_port}/test",
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/5"}


def _port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port


def test_nothing_answering_on_the_defaults_chooses_the_embedded_servers():
    closed = free_port()
    defaults = _defaults(postgres_port=closed, redis_port=closed)
    assert embedded.choose_services(defaults=defaults, environ={}) == {"DATABASE_URL": None, "CELERY_BROKER_URL": None}


def test_a_set_variable_is_kept_and_nothing_is_probed_or_started():
    closed = free_port()
    environ = {"DATABASE_URL": "postgresql://someone@db.internal/kintsugi", "CELERY_BROKER_URL": "redis://broker.internal/0"}
    assert embedded.choose_services(defaults=_defaults(postgres_port=closed, redis_port=closed), environ=environ) == {}
    assert embedded.local_services(defaults=_defaults(postgres_port=closed, redis_port=closed), environ=environ) == {}
    # An empty variable counts as unset, as base settings read it.
    only_broker_set = {"DATABASE_URL": "", "CELERY_BROKER_URL": "redis://broker.internal/0"}
    assert embedded.choose_services(defaults=_defaults(postgres_port=closed, redis_port=closed),
                                    environ=only_broker_set) == {"DATABASE_URL": None}


def test_a_redis_answering_on_the_default_is_the_machines(falkordb_url):
    """The session's FalkorDB is a redis-server that demands a password: it answers (NOAUTH), so a broker
    default pointing at it is kept."""
    defaults = _defaults(postgres_port=free_port(), redis_port=_port(falkordb_url))
    assert embedded.choose_services(defaults=defaults, environ={})["CELERY_BROKER_URL"] == defaults["CELERY_BROKER_URL"]


def test_a_postgres_answering_on_the_default_is_the_machines():
    db = settings.DATABASES["owner"]
    if not db["HOST"] or db["HOST"].startswith("/"):
        pytest.skip("the suite's Postgres listens on a unix socket only (the embedded one): no TCP address to probe")
    defaults = _defaults(postgres_host=db["HOST"], postgres_port=int(db["PORT"] or 5432), redis_port=free_port())
    assert embedded.choose_services(defaults=defaults, environ={})["DATABASE_URL"] == defaults["DATABASE_URL"]


def test_a_server_of_another_kind_on_the_default_port_does_not_count(falkordb_url):
    """A Redis where Postgres is expected is no Postgres, and a listener that never answers is no server:
    the embedded ones are chosen (they use ports of their own, so nothing collides)."""
    redis_port = _port(falkordb_url)
    assert embedded.choose_services(defaults=_defaults(postgres_port=redis_port, redis_port=free_port()),
                                    environ={})["DATABASE_URL"] is None
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        assert embedded.choose_services(defaults=_defaults(postgres_port=port, redis_port=port), environ={}) == {
            "DATABASE_URL": None, "CELERY_BROKER_URL": None}
        assert time.monotonic() - started < 3  # each probe gives up after half a second


def test_the_choice_is_exported_to_the_processes_the_run_starts():
    """The first process that loads the test settings chooses and exports: pytest-xdist's workers and the
    Celery workers, servers and commands the tests start inherit the variables and probe nothing."""
    assert os.environ["CELERY_BROKER_URL"] == settings.CELERY_BROKER_URL
    assert os.environ["DATABASE_URL"]
    assert set(DEFAULT_SERVICES) == {"DATABASE_URL", "CELERY_BROKER_URL"}
