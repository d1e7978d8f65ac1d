"""The deployment's Postgres is one of its own services however the application reaches it: a database
reached over a unix socket (the embedded one, libpq's default) left its port free as a replay URL,
because the socket has no host to compare an address with."""
from __future__ import annotations

import copy

import pytest

from core import egress
from provenance.models import AgentRegistration, Workspace
from tests.agents.test_egress import admin, cli_register  # noqa: F401  (the workspace admin and the CLI door)
from tests.helpers import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")]


@pytest.fixture
def database_over_a_socket(settings):
    """The settings as a socket deployment has them; the open connection keeps its own (TCP) settings."""
    databases = copy.deepcopy(settings.DATABASES)
    databases["default"].update(HOST="/tmp/kintsugi-postgres-socket", PORT="5433")
    settings.DATABASES = databases
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8", "::1/128"]  # the demo's layout: its agents on loopback
    return 5433


@pytest.mark.parametrize("url", ["http://127.0.0.1:5433/", "http://localhost:5433/x", "http://[::1]:5433/",
                                 "http://127.0.0.2:5433/", "http://2130706433:5433/"])
def test_the_postgres_port_is_refused_when_the_database_is_reached_over_a_socket(admin, database_over_a_socket, url):
    assert cli_register(url) == 2, url
    ws = Workspace.objects.get(name="egress-ws")
    answer = client_for(admin).post(f"/api/v1/workspaces/{ws.pk}/agents/",
                                    {"name": "far_agent", "replay_url": url, "reason": "r"}, format="json")
    assert answer.status_code == 400 and "egress policy" in answer.json()["error"]["message"], answer.content
    assert not AgentRegistration.objects.exists()


def test_libpq_s_default_socket_counts_its_default_port(settings):
    databases = copy.deepcopy(settings.DATABASES)
    databases["default"].update(HOST="", PORT="")
    settings.DATABASES = databases
    assert ("127.0.0.1", 5432) in egress.own_services()


def test_another_loopback_port_stays_allowed_for_the_demo_s_agents(admin, database_over_a_socket):
    assert cli_register("http://127.0.0.1:9/replay") == 0
