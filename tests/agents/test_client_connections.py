"""The Python client keeps its connection open from request to request, and sends a request twice only
when kintsugi cannot have run it, or running it twice records what running it once does
(kintsugi_client.connections). Each test puts a real server in front of the live server that counts
the TCP connections it accepts and closes a connection at a chosen moment; what was recorded is read
from kintsugi's own records, so a call sent twice shows as recorded twice."""
from __future__ import annotations

import threading
import time
import os
import urllib.error
from urllib.parse import urlsplit

import pytest

from kintsugi_client import Client, KintsugiError, RemoteRecorder, connections
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.graph.graph import workspace_graph
from provenance.models import Recording, Workspace
from tests.agents.connection_servers import (ANSWER, CUT, DROP, FORWARD, RESET_WHILE_SENDING, RUN_AND_DROP, Front,
                                             certificate_authority)

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "conn_writer"


@pytest.fixture(autouse=True)
def _fresh_connections():
    """Each test starts and ends with no connection kept by this thread (the live server outlives tests)."""
    connections.close_connections()
    yield
    connections.close_connections()


@pytest.fixture
def key(live_server, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="conn")
    register_agent(workspace=ws, name=AGENT, replay="http://127.0.0.1:9/replay", actor=admin, reason="test", via="cli")
    return issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")[1]


@pytest.fixture
def front(live_server):
    made: list[Front] = []

    def make(**kwargs) -> Front:
        made.append(Front(live_server.url, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def recordings() -> int:
    return Recording.objects.filter(workspace__name="conn").count()


def versions(key_name: str) -> int:
    """Fact versions of a key in the graph: one per set recorded (read once the recording committed)."""
    return workspace_graph("conn").ro_query("MATCH (f:Fact {key: $key}) RETURN count(f)", {"key": key_name})[0][0]


def finish(url: str, key: str, action: int) -> None:
    """Commit the recording through a client of its own, straight to the live server."""
    Client(url, key, keep_alive=0).call(action, "finish", {"decision": {"done": True}})


def fate_on(place: int, method: str, fate: str, *, path_part: str = ""):
    """The fate of the request at `place` on any connection (of `method`, with `path_part` in its path)."""
    return lambda conn, at, m, path: fate if (at == place and m == method and path_part in path) else FORWARD


class RetriesAnyFailure(Client):
    """The mistake the rule keeps out: a client that sends a request again whenever no whole answer came."""

    def _request_once(self, method, path, body):
        try:
            return super()._request_once(method, path, body)
        except urllib.error.URLError:
            return super()._request_once(method, path, body)


# --- one connection ---------------------------------------------------------------------------------------
def test_a_threads_requests_share_one_connection_and_the_background_sender_keeps_its_own(key, front):
    server = front()
    client = Client(server.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    for n in range(12):
        client.call(action, "set", {"key": f"k/{n}", "value": n})
    client.call(action, "finish", {"decision": {"done": True}})
    assert len(server.requests()) == 14 and server.connections == 1
    assert versions("k/0") == versions("k/11") == 1

    # Held-back calls sent in the background go on the sender thread's own connection, kept open too.
    batched = front()
    client = Client(batched.url, key, buffer=2, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t2"})["action"]
    rec = RemoteRecorder(client, action, {"ticket": "t2"})
    for n in range(8):
        rec.set(f"b/{n}", n)
    rec.finish({"done": True})
    paths = [entry[3].rsplit("/", 2)[-2] for entry in batched.requests()]
    assert paths.count("calls") >= 4 and batched.connections == 2
    assert versions("b/7") == 1


def test_keep_alive_zero_opens_a_connection_per_request_as_the_client_did_before(key, front):
    server = front()
    client = Client(server.url, key, buffer=0, keep_alive=0)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    for n in range(3):
        client.call(action, "set", {"key": f"k/{n}", "value": n})
    assert server.connections == len(server.requests()) == 4


def test_a_connection_idle_past_keep_alive_is_not_used_again(key, front):
    server = front()
    client = Client(server.url, key, buffer=0, keep_alive=1.0)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    client.call(action, "set", {"key": "a", "value": 1})
    time.sleep(1.5)  # the client drops it itself, ahead of a server's keep-alive timeout
    client.call(action, "set", {"key": "b", "value": 2})
    assert server.connections == 2 and len(server.requests()) == 3


# --- the server closes connections ---------------------------------------------------------------------------
def test_a_connection_the_server_closed_while_idle_is_replaced_and_each_call_lands_once(key, front, live_server):
    server = front(idle=1.0)  # its keep-alive timeout; the client would keep the connection 30 s
    client = Client(server.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    client.call(action, "set", {"key": "a", "value": 1})
    time.sleep(1.5)
    client.call(action, "set", {"key": "b", "value": 2})
    time.sleep(1.5)
    client.call(action, "finish", {"decision": {"done": True}})
    # Found closed before anything was sent: a new connection each time, every call sent once.
    assert [e[1] for e in server.requests()] == [1, 2, 1, 1] and server.connections == 3
    assert recordings() == 1 and versions("a") == versions("b") == 1


def test_a_closed_connection_is_found_before_a_request_that_would_leave_whole_is_sent_on_it(front):
    """A request without a body leaves in one write, which succeeds on a connection the server closed;
    only looking first keeps a POST from meeting it (with a body, the second write fails: rule 2)."""
    server = front(fate=lambda *args: ANSWER, idle=0.5)
    client = Client(server.url, "token", keep_alive=30)
    client.request("POST", "/a/", {"n": 1})
    time.sleep(1.0)
    assert client.request("POST", "/b/") == {"received": 0}
    assert [(m, p) for m, p, _ in server.received] == [("POST", "/a/"), ("POST", "/b/")] and server.connections == 2


def test_a_call_the_server_dropped_unread_on_a_reused_connection_is_raised_not_sent_again(key, front, live_server):
    # The connection closed as the set arrived: the client cannot tell this from a server that ran it.
    server = front(fate=fate_on(2, "POST", DROP, path_part="/set/"))
    client = Client(server.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    with pytest.raises(urllib.error.URLError) as lost:
        client.call(action, "set", {"key": "a", "value": 1})
    assert isinstance(lost.value.reason, ConnectionError)
    assert len(server.requests("POST")) == 2  # the open, and the set once
    finish(live_server.url, key, action)
    assert versions("a") == 0  # it never reached kintsugi, and was not sent twice


def test_an_effect_whose_answer_was_lost_is_sent_again_and_recorded_once(key, front, live_server):
    # Run, then the connection reset before the answer: its idempotency key makes the second one the same.
    server = front(fate=fate_on(2, "POST", RUN_AND_DROP, path_part="/effect/"))
    client = Client(server.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    answer = client.call(action, "effect", {"kind": "note", "amount": 0, "ticket": "t1", "external": True,
                                            "details": {}, "idempotency_key": "note-t1"})
    assert answer["effect"] == 0 and answer["perform"] is True
    assert [e[4] for e in server.requests("POST")] == [FORWARD, RUN_AND_DROP, FORWARD] and server.connections == 2
    finish(live_server.url, key, action)
    effects = workspace_graph("conn").ro_query("MATCH (e:Effect) RETURN count(e)")[0][0]
    assert effects == 1


def test_a_read_whose_answer_was_lost_is_sent_again(live_server, django_user_model, front):
    from rest_framework.authtoken.models import Token

    person = django_user_model.objects.create_superuser("lead", "lead@example.com", "pass-1234-kintsugi")
    server = front(fate=lambda conn, at, method, path: RUN_AND_DROP if (conn, at) == (1, 3) else FORWARD)
    client = Client(server.url, Token.objects.create(user=person).plain_key, keep_alive=30)
    client.ensure_workspace("reads", reason="test")  # a GET and a POST on one connection
    assert [w["name"] for w in client.workspaces()] == ["reads"]  # its answer lost, and asked again
    assert [(e[2], e[4]) for e in server.requests()] == [("GET", FORWARD), ("POST", FORWARD),
                                                         ("GET", RUN_AND_DROP), ("GET", FORWARD)]


# --- the server dies while running a call ----------------------------------------------------------------------
@pytest.mark.parametrize("fate", [RUN_AND_DROP, CUT])
def test_a_server_that_dies_after_running_a_call_raises_it_and_the_call_is_recorded_once(key, front, live_server,
                                                                                         fate):
    server = front(fate=fate_on(2, "POST", fate, path_part="/recording/actions/"))
    client = Client(server.url, key, buffer=0, keep_alive=30)
    first = client.open_action(AGENT, {"ticket": "t1"})["action"]
    with pytest.raises(urllib.error.URLError):
        client.open_action(AGENT, {"ticket": "t2"})  # run by kintsugi, its answer lost
    assert len(server.requests("POST")) == 2
    assert recordings() == 2  # the first, and the lost one once: no third
    client.call(first, "set", {"key": "a", "value": 1})  # the client goes on, on a new connection
    assert server.connections == 2


@pytest.mark.parametrize("fate", [RUN_AND_DROP, CUT])
def test_red_a_client_that_sends_a_call_again_after_a_lost_answer_records_it_twice(key, front, fate):
    """The check above catches the mistake: the same server, a client that retries any lost answer."""
    server = front(fate=fate_on(2, "POST", fate, path_part="/recording/actions/"))
    client = RetriesAnyFailure(server.url, key, buffer=0, keep_alive=30)
    client.open_action(AGENT, {"ticket": "t1"})
    client.open_action(AGENT, {"ticket": "t2"})  # answered the second time
    assert recordings() == 3  # the lost one recorded twice: what the real client's test refuses


def test_a_set_whose_answer_was_lost_is_recorded_once_and_twice_by_a_client_that_retries_it(key, front, live_server):
    for client_class, expected in ((Client, 1), (RetriesAnyFailure, 2)):
        connections.close_connections()
        server = front(fate=fate_on(2, "POST", RUN_AND_DROP, path_part="/set/"))
        client = client_class(server.url, key, buffer=0, keep_alive=30)
        action = client.open_action(AGENT, {"ticket": client_class.__name__})["action"]
        try:
            client.call(action, "set", {"key": f"lost/{client_class.__name__}", "value": 1})
        except urllib.error.URLError:
            assert client_class is Client
        finish(live_server.url, key, action)
        assert versions(f"lost/{client_class.__name__}") == expected


# --- sending fails part way ------------------------------------------------------------------------------------
def test_a_request_reset_before_it_was_all_sent_goes_again_on_a_new_connection(front):
    """Reset while the body was still on its way: the server never had the whole request, so it is sent
    again, and the server reads it whole exactly once."""
    server = front(fate=lambda conn, at, method, path: RESET_WHILE_SENDING if (conn, at) == (1, 2) else ANSWER,
                   window=4096)
    client = Client(server.url, "token", keep_alive=30)
    assert client.request("POST", "/small/", {"n": 1}) == {"received": 8}
    blob = "x" * (8 << 20)  # more than the sockets between them hold: the send waits, then meets the reset
    answer = client.request("POST", "/large/", {"blob": blob})
    assert answer["received"] > 8 << 20
    assert [(m, p) for m, p, _ in server.received] == [("POST", "/small/"), ("POST", "/large/")]
    assert [e[4] for e in server.requests()] == [ANSWER, RESET_WHILE_SENDING, ANSWER] and server.connections == 2


def test_a_new_connection_that_fails_is_never_retried(front):
    server = front(fate=lambda conn, at, method, path: DROP)
    with pytest.raises(urllib.error.URLError):
        Client(server.url, "token", keep_alive=30).request("GET", "/x/")  # idempotent, but not on a reused one
    assert len(server.requests()) == 1


# --- TLS and proxies, as urlopen honoured them ---------------------------------------------------------------------
def test_https_verifies_the_certificate_and_keeps_its_connection(key, front, tmp_path, monkeypatch):
    ca_file, context = certificate_authority(tmp_path)
    tls = front(tls=context)
    with pytest.raises(urllib.error.URLError) as refused:
        Client(tls.url, key).open_action(AGENT, {"ticket": "t0"})  # a CA the default trust store lacks
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.reason)
    assert tls.requests() == [] and recordings() == 0
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # honoured by the default context, as under urlopen
    client = Client(tls.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    for n in range(5):
        client.call(action, "set", {"key": f"k/{n}", "value": n})
    assert len(tls.requests()) == 6 and tls.connections == 1


def test_http_proxy_from_the_environment_carries_the_requests_on_one_connection(key, front, live_server,
                                                                                monkeypatch):
    proxy = front()
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://desk:s%40cret@127.0.0.1:{proxy.port}")
    client = Client(live_server.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    client.call(action, "set", {"key": "a", "value": 1})
    assert len(proxy.requests()) == 2 and proxy.connections == 1
    assert {e[5] for e in proxy.requests()} == {"Basic ZGVzazpzQGNyZXQ="}  # desk:s@cret
    monkeypatch.setenv("NO_PROXY", urlsplit(live_server.url).hostname)
    client.call(action, "set", {"key": "b", "value": 2})
    assert len(proxy.requests()) == 2  # bypassed


def test_https_proxy_from_the_environment_tunnels_one_verified_connection(key, front, tmp_path, monkeypatch):
    ca_file, context = certificate_authority(tmp_path)
    tls, proxy = front(tls=context), front()
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://desk:pw@127.0.0.1:{proxy.port}")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    client = Client(tls.url, key, buffer=0, keep_alive=30)
    action = client.open_action(AGENT, {"ticket": "t1"})["action"]
    for n in range(3):
        client.call(action, "set", {"key": f"k/{n}", "value": n})
    tunnels = [(e[2], e[3], e[5]) for e in proxy.requests()]
    assert tunnels == [("CONNECT", f"127.0.0.1:{tls.port}", "Basic ZGVzazpwdw==")]  # desk:pw
    assert len(tls.requests()) == 4 and tls.connections == 1


def test_errors_keep_their_shape_and_a_redirect_is_not_followed(key, front, live_server):
    client = Client(live_server.url, key, keep_alive=30)
    with pytest.raises(KintsugiError) as refused:
        client.open_action("nobody", {})
    assert refused.value.status == 404 and refused.value.code and refused.value.message
    with pytest.raises(KintsugiError) as moved:
        client.request("GET", "/admin/")  # to the sign-in page: the token goes nowhere it points
    assert moved.value.status == 302 and moved.value.code == "http_error"
    assert "redirected to '/admin/login/?next=/admin/'" in moved.value.message
    client.open_action(AGENT, {"ticket": "t1"})  # the same connection, still good


def test_each_thread_and_each_forked_process_uses_connections_of_its_own(front):
    server = front(fate=lambda *args: ANSWER)
    client = Client(server.url, "token", keep_alive=30)

    def work():
        for n in range(3):
            client.request("POST", "/x/", {"n": n})

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.connections == 3 and len(server.requests()) == 9

    # A child forked after the parent used its connection opens its own: one socket in two processes
    # would mix their answers.
    client.request("POST", "/x/", {"n": "parent"})
    pid = os.fork()
    if pid == 0:
        try:
            client.request("POST", "/x/", {"n": "child"})
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    client.request("POST", "/x/", {"n": "parent again"})
    assert server.connections == 5 and len(server.requests()) == 12
