"""The egress policy for replay URLs: where a URL may point is checked when it is registered (API 400,
command line exit 2, a form error in the admin) and again when the worker connects; redirects are not
followed; a failure is stored in fixed words, never the remote side's text; a repair gives up on an
agent that does not answer after a bounded number of attempts."""
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.urls import reverse

from core import egress
from provenance.models import AgentRegistration, Workspace
from provenance.recording.replay import ReplayUnavailable
from repairs.job import run_repair
from repairs.models import Incident
from tests.agents.test_replay_failures import Agent, recorded
from tests.helpers import client_for
from tests.helpers import graph_dump, open_incident

pytestmark = pytest.mark.django_db(transaction=True)

DENIED = [
    "http://127.0.0.1:9/replay",  # loopback, once the allow-list does not cover it
    "http://localhost:9/replay",  # a name that resolves to loopback
    "http://[::1]:9/replay",
    "http://[::ffff:127.0.0.1]:9/replay",
    "http://2130706433:9/replay",  # 127.0.0.1 written as one number
    "http://0.0.0.0:9/replay",
    "http://10.1.2.3/replay",
    "http://192.168.1.10/replay",
    "http://100.64.0.1/replay",  # shared address space (carrier NAT)
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/replay",
    "http://224.0.0.1/replay",
]


class Listener:
    """A real HTTP server on loopback answering every request with `status` (and a Location for 3xx)."""

    def __init__(self, status=200, location=None, body=b"{}"):
        self.hits = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                listener.hits.append((self.command, self.path, self.headers.get("Host"), self.rfile.read(length)))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/replay"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def admin(make_user):
    user = make_user("egress-admin", roles=["Workspace admin"])
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    call_command("onboard", "workspace", "--name", "egress-ws", "--user", "egress-admin", "--reason", "setup")
    return user


def cli_register(url: str) -> int:
    try:
        call_command("onboard", "agent", "--workspace", "egress-ws", "--name", "far_agent", "--replay-url", url,
                     "--user", "egress-admin", "--reason", "setup")
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.parametrize("url", DENIED)
def test_every_inward_address_is_refused_at_registration_by_api_cli_and_admin(admin, settings, client, url):
    settings.KINTSUGI_EGRESS_ALLOW = []
    ws = Workspace.objects.get(name="egress-ws")
    answer = client_for(admin).post(f"/api/v1/workspaces/{ws.pk}/agents/",
                                    {"name": "far_agent", "replay_url": url, "reason": "r"}, format="json")
    assert answer.status_code == 400, answer.content
    assert set(answer.json()["error"]) == {"code", "message", "details"}
    assert "egress policy" in answer.json()["error"]["message"]
    assert cli_register(url) == 2
    client.force_login(admin)
    page = client.post(reverse("admin:provenance_agentregistration_add"),
                       {"workspace": ws.pk, "name": "far_agent", "replay": url, "timeout_seconds": 30, "reason": "r"})
    assert page.status_code == 200 and "egress policy" in page.content.decode()
    assert not AgentRegistration.objects.exists()


def test_the_deployment_s_own_services_are_refused_even_where_the_allow_list_covers_them(admin, settings):
    # The demo's layout: loopback allowed for its own agents, FalkorDB and the broker on loopback too.
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8", "::1/128"]
    settings.FALKORDB_URL = "redis://:pw@127.0.0.1:6479"
    settings.CELERY_BROKER_URL = "redis://:pw@127.0.0.1:6480/0"
    settings.KINTSUGI_FALKORDB_URLS = ["redis://:pw@localhost:6481"]
    settings.KINTSUGI_WEB_HOST, settings.KINTSUGI_WEB_PORT = "0.0.0.0", 8000
    for url in ("http://127.0.0.1:6479/", "http://127.0.0.1:6480/x", "http://localhost:6480/",
                "http://127.0.0.2:6481/", "http://127.0.0.1:6481/", "http://127.0.0.1:8000/api/v1/",
                "http://127.0.0.1:8765/mcp", "http://169.254.169.254/latest/meta-data/"):
        assert cli_register(url) == 2, url
    db = settings.DATABASES["default"]
    if db.get("HOST") and not db["HOST"].startswith("/"):
        assert cli_register(f"http://{db['HOST']}:{db.get('PORT') or 5432}/") == 2
    assert not AgentRegistration.objects.exists()
    assert cli_register("http://127.0.0.1:9/replay") == 0  # the demo's own loopback agents
    assert AgentRegistration.objects.get().replay_url == "http://127.0.0.1:9/replay"


def test_a_mistyped_allow_list_stops_the_start():
    with pytest.raises(Exception, match="not an address or CIDR"):
        egress.parse_allow_list(["10.0.0.0/8", "ten-dot"])
    assert egress.parse_allow_list(["10.0.0.0/8", " ", "fd00::/8"]) == ["10.0.0.0/8", "fd00::/8"]


def test_a_redirect_is_not_followed(settings):
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8"]
    target = Listener()
    for location in (target.url, "ftp://127.0.0.1:%d/" % target.port):
        redirecting = Listener(status=302, location=location)
        with pytest.raises(egress.EgressFailed) as failed:
            egress.post_json(redirecting.url, b"{}", timeout=5)
        assert failed.value.outcome == egress.Outcome.REDIRECT
        assert len(redirecting.hits) == 1
    assert target.hits == []


def test_the_connection_goes_to_the_address_checked_with_the_original_host(settings, monkeypatch):
    """A name whose DNS answer changes after the check (rebinding) still reaches the address checked."""
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8"]
    target = Listener()
    real, asked = socket.getaddrinfo, []

    def rebinding(host, *args, **kwargs):
        if host != "agent.rebind.test":
            return real(host, *args, **kwargs)
        asked.append(host)
        address = "127.0.0.1" if len(asked) == 1 else "169.254.169.254"
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    assert egress.post_json(f"http://agent.rebind.test:{target.port}/replay?x=1", b'{"a": 1}', timeout=5) == 200
    assert asked == ["agent.rebind.test"]
    assert target.hits == [("POST", "/replay?x=1", f"agent.rebind.test:{target.port}", b'{"a": 1}')]
    with pytest.raises(egress.EgressFailed) as failed:  # the next request checks the next answer
        egress.post_json(f"http://agent.rebind.test:{target.port}/replay", b"{}", timeout=5)
    assert failed.value.outcome == egress.Outcome.REFUSED and len(target.hits) == 1


@pytest.mark.parametrize("status, outcome", [(401, egress.Outcome.ANSWERED_4XX), (502, egress.Outcome.ANSWERED_5XX)])
def test_an_error_answer_is_told_by_its_class_only(settings, status, outcome):
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8"]
    with pytest.raises(egress.EgressFailed) as failed:
        egress.post_json(Listener(status=status, body=b"banner: internal-api 3.1").url, b"{}", timeout=5)
    assert str(failed.value) == outcome


def banner_server() -> int:
    """A TCP service that is not HTTP: it says its name and hangs up."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def serve():
        while True:
            conn, _ = sock.accept()
            conn.sendall(b"SSH-2.0-OpenSSH_9.2 internal-bastion\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return sock.getsockname()[1]


def test_a_repair_stores_fixed_words_and_needs_attention_after_the_bounded_attempts(settings):
    settings.KINTSUGI_REPLAY_MAX_ATTEMPTS = 3
    ws = recorded("egress-gives-up", Agent(lambda request: None))
    before = graph_dump(ws.name)
    AgentRegistration.objects.filter(workspace=ws).update(replay_url=f"http://127.0.0.1:{banner_server()}/replay")
    incident = open_incident(ws.name, "kb/page")
    errors = []
    for attempt in (1, 2):
        with pytest.raises(ReplayUnavailable):
            run_repair(incident_id=incident.pk)
        incident.refresh_from_db()
        assert incident.status == "blocked" and incident.replay_failures == attempt
        errors.append(incident.error)
    AgentRegistration.objects.filter(workspace=ws).update(replay_url=f"http://127.0.0.1:{free_port()}/replay")
    assert run_repair(incident_id=incident.pk).status == "needs_attention"  # never failed: the agent is only down
    incident.refresh_from_db()
    errors.append(incident.error)
    assert incident.replay_failures == 3 and "needs attention" in incident.error
    for error in errors:  # both agents are down: the first replay, the writer's digest of the page, finds it
        assert error.startswith("agent 'writer' unreachable: replay of action"), error
        for remote in ("SSH", "bastion", "refused", "Errno", "closed", "Remote end"):
            assert remote not in error, error
    assert graph_dump(ws.name) == before
    # The sweep's next attempt finds the agent still down: it still needs attention, never failed.
    assert run_repair(incident_id=incident.pk).status == "needs_attention"
    assert not incident.transitions.filter(to_status="failed").exists()


def test_a_url_the_policy_refuses_at_connection_fails_the_repair_at_once(settings):
    agent = Agent(lambda request: None)
    ws = recorded("egress-refused-later", agent)
    settings.KINTSUGI_EGRESS_ALLOW = []  # the operator narrowed the policy after the agent was registered
    incident = run_repair(incident_id=open_incident(ws.name, "kb/page").pk)
    # Both agents' URLs are refused now: the first replay, the writer's, fails the repair before any request.
    assert incident.status == "failed" and "agent 'writer' refused by egress policy" in incident.error
    assert agent.requests == [] and Incident.objects.get(pk=incident.pk).replay_failures == 0


def test_a_name_that_does_not_resolve_is_unreachable_not_refused(settings):
    with pytest.raises(egress.EgressFailed) as failed:
        egress.post_json("http://agent.invalid/replay", b"{}", timeout=5)
    assert failed.value.outcome == egress.Outcome.UNREACHABLE
    assert egress.check_url("http://agent.invalid/replay")  # registered now, checked again on each call
