"""The recording protocol over the API: the in-process recorder's graph, call for call; and bad calls
answered in the API's error shape with nothing left behind, in Postgres or the graph."""
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from compensation.models import AuditEvent
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.recording import staging
from provenance.models import Recording, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import record_root
from tests.helpers import graph_dump

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def setup(django_user_model):
    import tests.agents_example  # noqa: F401  (registers faq_writer / faq_reader in-process)

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")

    def make(name: str, agents=None):
        ws = Workspace.objects.create(name=name)
        for agent in ("http_faq_writer", "http_faq_reader"):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", agents=agents, actor=admin, reason="test", via="cli")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return ws, client
    return make


def post(client, path, body, status=200):
    response = client.post(f"/api/v1/recording/actions/{path}", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def faq_over_http(client, topic="returns", answer="30 days"):
    """What the faq_writer and faq_reader functions do, as protocol calls of agents registered as remote."""
    opened = post(client, "", {"agent": "http_faq_writer", "payload": {"topic": topic, "answer": answer,
                                                                 "valid_from": "2026-01-01"}}, 201)
    a = opened["action"]
    post(client, f"{a}/set/", {"key": f"faq/{topic}", "value": answer, "valid_from": "2026-01-01"})
    post(client, f"{a}/handoff/", {"agent": "http_faq_reader", "payload": {"topic": topic}})
    done = post(client, f"{a}/finish/", {"decision": {"topic": topic}})
    assert done["committed"] is False and done["next"]["agent"] == "http_faq_reader"
    child = post(client, "", {"agent": "http_faq_reader", "parent": a}, 201)["action"]
    got = post(client, f"{child}/get/", {"key": f"faq/{topic}"})
    assert got == {"key": f"faq/{topic}", "value": answer, "found": True}
    done = post(client, f"{child}/finish/", {"decision": {"has_answer": True}})
    assert done["committed"] is True and done["actions"] == [a, child]


def _shape(workspace):
    dump = json.loads(json.dumps(graph_dump(workspace)).replace("http_faq_", "faq_"))  # the same agents, renamed
    facts = workspace_graph(workspace).ro_query(
        "MATCH (f:Fact) RETURN f.key, f.value, f.version, f.seq, f.valid_from, f.writer ORDER BY f.id")
    return dump, facts


def test_http_recording_writes_the_graph_the_in_process_recorder_writes(setup):
    _, client = setup("over-http")
    faq_over_http(client)
    local = Workspace.objects.create(name="in-process")
    record_root(workspace=local.name, agent="faq_writer",
                payload={"topic": "returns", "answer": "30 days", "valid_from": "2026-01-01"})
    assert _shape("over-http") == _shape("in-process")  # nodes, READ / FEEDS / HANDED_OFF, clocks, hashes
    assert Workspace.objects.get(name="over-http").action_count == 2


def _nothing_recorded(ws):
    assert workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0] == 0


def test_bad_calls_answer_the_error_shape_and_leave_nothing_behind(setup):
    ws, client = setup("bad-calls")
    for body, status in [({"agent": "nobody", "payload": {}}, 404), ({"agent": "faq_writer", "payload": {}}, 400),
                         ({"agent": "http_faq_writer", "payload": []}, 400),
                         ({"agent": "http_faq_writer", "payload": {"x": "a" * 70000}}, 400),
                         ({"agent": "http_faq_writer", "payload": {}, "extra": 1}, 400),
                         ({"agent": "http_faq_reader", "parent": 1}, 404)]:
        error = post(client, "", body, status)["error"]
        assert set(error) == {"code", "message", "details"}
    assert not Recording.objects.exists()

    a = post(client, "", {"agent": "http_faq_writer", "payload": {"topic": "t"}}, 201)["action"]
    for call, body, status in [("set", {"key": "bad\x00key", "value": 1}, 400), ("set", {"key": "k"}, 400),
                               ("get", {"key": ""}, 400), ("effect", {"kind": "refund", "amount": 5}, 400),
                               ("effect", {"kind": "refund", "amount": -5, "idempotency_key": "k"}, 400),
                               ("handoff", {"agent": "nobody", "payload": {}}, 404),
                               ("finish", {"decision": {"score": 0.5}}, 400), ("finish", {"decision": "ok"}, 400),
                               ("teleport", {}, 404)]:
        assert post(client, f"{a}/{call}/", body, status)["error"]["code"]
    state = Recording.objects.get().state["records"][0]
    assert state["writes"] == state["effects"] == state["handoffs"] == [] and state["dhash"] is None

    # An idempotency key is one effect; the same key for another effect is a conflict.
    first = post(client, f"{a}/effect/", {"kind": "refund", "amount": 500, "ticket": "t1", "external": True, "idempotency_key": "r1"})
    again = post(client, f"{a}/effect/", {"kind": "refund", "amount": 500, "ticket": "t1", "external": True, "idempotency_key": "r1"})
    assert first == again and first["perform"] is True and first["held"] is False
    post(client, f"{a}/effect/", {"kind": "refund", "amount": 900, "ticket": "t1", "external": True, "idempotency_key": "r1"}, 409)
    assert len(Recording.objects.get().state["records"][0]["effects"]) == 1

    # Another root opens beside the open one, with ids of its own; abandoning the first records nothing of
    # it, and the audit says what it announced.
    b = post(client, "", {"agent": "http_faq_reader", "payload": {"topic": "t"}}, 201)["action"]
    assert b > a and Recording.objects.filter(status="open").count() == 2
    post(client, f"{a}/abandon/", {"reason": "agent crashed"})
    assert Recording.objects.get(first_action=a).status == "abandoned"
    assert Recording.objects.get(first_action=b).status == "open"
    event = AuditEvent.objects.get(action="recording.abandoned")
    assert event.data["effects_count"] == 1
    post(client, f"{a}/set/", {"key": "k", "value": 1}, 409)
    _nothing_recorded(ws)


def test_an_idle_recording_expires_with_nothing_in_the_graph(setup, settings):
    ws, client = setup("idle")
    a = post(client, "", {"agent": "http_faq_writer", "payload": {"topic": "t", "answer": "a"}}, 201)["action"]
    post(client, f"{a}/set/", {"key": "faq/t", "value": "a"})
    post(client, f"{a}/handoff/", {"agent": "http_faq_reader", "payload": {"topic": "t"}})
    post(client, f"{a}/finish/", {"decision": {"topic": "t"}})  # the parent finished, its handoff never opened
    idle = timezone.now() - timedelta(seconds=settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS + 1)
    Recording.objects.update(touched_at=idle)
    for row in Recording.objects.all():  # its staged calls were as long ago
        staging._redis().hset(staging._key(row), "t", idle.timestamp())
    assert post(client, "", {"agent": "http_faq_reader", "parent": a}, 409)["error"]["code"] == "conflict"
    _nothing_recorded(ws)
    faq_over_http(client, topic="u")  # the next root expires the idle one and records on its own
    assert Recording.objects.get(first_action=a).status == "expired"
    post(client, f"{a}/set/", {"key": "faq/t", "value": "late"}, 409)  # its id is never handed out again
    assert AuditEvent.objects.filter(action="recording.expired").count() == 1
    assert workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0] == 2


def test_a_call_on_a_stale_copy_of_its_recording_lands_on_the_row_as_it_stands(setup):
    """A web process applies a call to its cached copy of the recording and writes it back only if no
    other process's call changed the row since; here the copy is made stale by hand, as another
    worker's call would leave it, and both sets must reach the graph."""
    from provenance.recording import remote

    ws, client = setup("stale-copy")
    a = post(client, "", {"agent": "http_faq_writer", "payload": {"topic": "t", "answer": "a"}}, 201)["action"]
    row = Recording.objects.select_related("workspace").get(first_action=a)
    with remote._cache_lock:
        current = remote._cache.pop(row.pk)
    stale = (row.version, remote._session(row), row)  # a copy of its own, as another process holds it
    with remote._cache_lock:
        remote._cache[row.pk] = current
    post(client, f"{a}/set/", {"key": "faq/first", "value": 1})  # lands; this process's copy moves on
    assert staging.read(row).version == stale[0] + 1  # staged (provenance.recording.staging), not in the row
    with remote._cache_lock:
        remote._cache[row.pk] = stale  # now the copy from before that call is the one at hand
    post(client, f"{a}/set/", {"key": "faq/second", "value": 2})
    post(client, f"{a}/handoff/", {"agent": "http_faq_reader", "payload": {"topic": "t"}})
    post(client, f"{a}/finish/", {"decision": {"topic": "t"}})
    child = post(client, "", {"agent": "http_faq_reader", "parent": a}, 201)["action"]
    assert post(client, f"{child}/get/", {"key": "faq/first"})["value"] == 1
    assert post(client, f"{child}/finish/", {"decision": {"has_answer": True}})["committed"] is True
    keys = workspace_graph(ws.name).ro_query("MATCH (f:Fact) RETURN f.key ORDER BY f.key")
    assert [k[0] for k in keys] == ["faq/first", "faq/second"]


def test_tokens_are_scoped_to_their_workspace_and_agents(setup):
    ws, client = setup("scoped", agents=["http_faq_reader"])
    other_ws, other = setup("other")
    assert post(client, "", {"agent": "http_faq_writer", "payload": {"topic": "t"}}, 403)["error"]["code"] == \
        "permission_denied"
    a = post(other, "", {"agent": "http_faq_writer", "payload": {"topic": "t"}}, 201)["action"]
    assert post(client, f"{a}/get/", {"key": "k"}, 404)["error"]["code"] == "not_found"  # another workspace's
    anonymous = APIClient()
    assert anonymous.post(f"/api/v1/recording/actions/{a}/get/", {"key": "k"}, format="json").status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer kag_not-a-token")
    assert anonymous.post("/api/v1/recording/actions/", {}, format="json").json()["error"]["code"] == \
        "authentication_failed"
    _nothing_recorded(ws)
