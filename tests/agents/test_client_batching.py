"""The Python client sends what the agent needs no answer to (set, handoff) in the background: fewer
requests, the same recording. A held-back call the server refuses is raised by the action's next call
(or its finish, or flush), never lost, and nothing is recorded past it."""
from __future__ import annotations

import pytest

from kintsugi_client import Client, Desk, KintsugiError, RecordingBatch, RemoteRecorder
from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import record_root
from tests.agents.test_recording_protocol import _shape

pytestmark = pytest.mark.django_db(transaction=True)


class Counting(Client):
    """A client that notes the path of every request it makes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.paths: list[str] = []

    def request(self, method, path, body=None):
        self.paths.append(path.rsplit("/", 2)[-2] if path.endswith("/") else path)
        return super().request(method, path, body)


@pytest.fixture
def workspace(live_server, django_user_model):
    import tests.agents_example  # noqa: F401  (faq_writer / faq_reader in-process, for the comparison)

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")

    def make(name: str, *, buffer: int = 64) -> Counting:
        ws = Workspace.objects.create(name=name)
        for agent in ("http_faq_writer", "http_faq_reader"):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
        return Counting(live_server.url, key, buffer=buffer)
    return make


def faq_desk(client: Client, *, extra_sets: int = 0) -> Desk:
    desk = Desk(client)

    @desk.agent("http_faq_writer")
    def writer(rec, p):
        for n in range(extra_sets):
            rec.set(f"scratch/{n}", n)
        rec.set(f"faq/{p['topic']}", p["answer"], valid_from=p.get("valid_from"))
        rec.handoff("http_faq_reader", {"topic": p["topic"]})
        return {"topic": p["topic"]}

    @desk.agent("http_faq_reader")
    def reader(rec, p):
        return {"has_answer": rec.get(f"faq/{p['topic']}") is not None}

    return desk


PAYLOAD = {"topic": "returns", "answer": "30 days", "valid_from": "2026-01-01"}


def test_a_desk_recorded_through_the_batching_client_is_the_one_recorded_call_by_call_in_fewer_requests(workspace):
    batched, one_by_one = workspace("batched"), workspace("one-by-one", buffer=0)
    assert len(faq_desk(batched).run_root("http_faq_writer", PAYLOAD)) == 2
    faq_desk(one_by_one).run_root("http_faq_writer", PAYLOAD)
    Workspace.objects.create(name="in-process")
    record_root(workspace="in-process", agent="faq_writer", payload=PAYLOAD)
    assert _shape("batched") == _shape("one-by-one") == _shape("in-process")
    # The writer's set and handoff ride with its finish; the reader's get needs its answer at once.
    assert batched.paths == ["actions", "calls", "actions", "get", "finish"]
    assert one_by_one.paths == ["actions", "set", "handoff", "finish", "actions", "get", "finish"]


def test_held_back_calls_go_in_the_background_once_the_buffer_is_full_and_record_the_same(workspace):
    small = workspace("small-buffer", buffer=2)
    faq_desk(small, extra_sets=5).run_root("http_faq_writer", PAYLOAD)
    plain = workspace("plain", buffer=0)
    faq_desk(plain, extra_sets=5).run_root("http_faq_writer", PAYLOAD)
    assert _shape("small-buffer") == _shape("plain")
    # 7 held calls in buffers of 2: three sent in the background, the last one with the finish.
    assert small.paths.count("calls") == 4 and "set" not in small.paths


def test_a_refused_held_back_set_is_raised_by_the_next_call_and_nothing_after_it_is_recorded(workspace):
    client = workspace("refused")
    action = client.open_action("http_faq_writer", {"topic": "t"})["action"]
    rec = RemoteRecorder(client, action, {"topic": "t"})
    rec.set("faq/good", 1)
    rec.set("", 2)  # held back: the agent is not told yet
    assert client.paths == ["actions"]
    with pytest.raises(KintsugiError) as refused:
        rec.get("faq/good")
    assert refused.value.status == 400 and refused.value.details["call"] == 1 and refused.value.details["op"] == "set"
    # Sticky: the action cannot go on past the gap, not even to finish.
    with pytest.raises(KintsugiError) as again:
        rec.finish({"done": True})
    assert again.value is refused.value
    assert client.paths == ["actions", "calls"]  # the finish never left


def test_a_refusal_of_a_background_send_is_raised_at_the_finish(workspace):
    client = workspace("refused-background", buffer=2)
    action = client.open_action("http_faq_writer", {"topic": "t"})["action"]
    rec = RemoteRecorder(client, action, {"topic": "t"})
    rec.set("faq/good", 1)
    rec.set("", 2)  # the buffer is full: sent on the background thread, refused there
    with pytest.raises(KintsugiError) as refused:
        rec.finish({"done": True})
    assert refused.value.details["call"] == 1
    with pytest.raises(KintsugiError):
        rec.flush()


def test_a_refused_call_that_needs_an_answer_leaves_the_held_calls_recorded_as_call_by_call_would(workspace):
    client = workspace("refused-answer")
    action = client.open_action("http_faq_writer", {"topic": "t"})["action"]
    rec = RemoteRecorder(client, action, {"topic": "t"})
    rec.set("faq/kept", "yes")
    with pytest.raises(KintsugiError) as refused:
        rec.get("")
    assert refused.value.status == 400 and "call" not in (refused.value.details or {})  # the single call's own refusal
    assert rec.get("faq/kept") == "yes"  # the set landed; the action goes on as it would have
    assert rec.finish({"topic": "t"})["action"] == action


def test_the_batch_forms_are_helpers(workspace):
    client = workspace("forms")
    batch = RecordingBatch()
    writer = batch.action("http_faq_writer", PAYLOAD)
    writer.set("faq/returns", "30 days", valid_from="2026-01-01").handoff("http_faq_reader", {"topic": "returns"})
    writer.finish({"topic": "returns"})
    batch.action("http_faq_reader", parent=writer).get("faq/returns").finish({"has_answer": True})
    answer = client.record_batch(batch)
    assert answer["committed"] and len(answer["actions"]) == 2
    assert answer["results"][1][0]["value"] == "30 days"
    Workspace.objects.create(name="in-process")
    record_root(workspace="in-process", agent="faq_writer", payload=PAYLOAD)
    assert _shape("forms") == _shape("in-process")

    other = workspace("several")
    action = other.open_action("http_faq_writer", PAYLOAD)["action"]
    rec = RemoteRecorder(other, action, PAYLOAD)
    rec.set("faq/a", 1)
    assert rec.get_many(["faq/a", "faq/none"], default="-") == [1, "-"]
    assert other.paths == ["actions", "calls"]


def test_a_recorder_whose_last_buffer_went_in_the_background_is_let_go_once_it_finishes(workspace):
    from kintsugi_client import recorder

    # 6 held calls in buffers of 2: all three go in the background, and the finish has nothing to carry.
    # The recorders that hold calls are kept for the exit's flush; a finished one must not stay with them.
    client, before = workspace("let-go", buffer=2), set(recorder._HOLDING)  # other tests' refused ones stay
    faq_desk(client, extra_sets=4).run_root("http_faq_writer", PAYLOAD)
    assert client.paths.count("calls") == 3 and "finish" in client.paths
    assert recorder._HOLDING <= before
