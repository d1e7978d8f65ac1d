"""An open HTTP recording's calls that only stage go to its staged state (provenance.recording.staging) with no
Postgres statement; an effect is in the row before the agent is told to perform it; a recording whose
staged calls were lost is refused, never committed short."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from django.db import connection
from django.test.utils import CaptureQueriesContext

from provenance.graph import queries
from provenance.recording import remote
from provenance.recording import staging
from provenance.graph.graph import workspace_graph
from provenance.models import AgentToken, Recording, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.protocol import CallConflict

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(django_user_model) -> AgentToken:
    admin = django_user_model.objects.create_superuser("stager", "s@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="staged")
    for agent in ("staged_writer", "staged_reader"):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="t",
                       via="cli")
    issued, _ = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    return AgentToken.objects.select_related("workspace").get(pk=issued.pk)


def _statements(fn) -> tuple[object, int]:
    with CaptureQueriesContext(connection) as ctx:
        answer = fn()
    return answer, len(ctx.captured_queries)


def test_staged_calls_write_no_postgres_statement_and_an_effect_is_in_the_row_first(token):
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 1})["action"]
    for op, body in (("set", {"key": "faq/1", "value": "one"}), ("get", {"key": "faq/1"}),
                     ("handoff", {"agent": "staged_reader", "payload": {"n": 1}})):
        _, statements = _statements(lambda: remote.call(token=token, action_id=a, op=op, body=body))
        assert statements == 0, op
    answer, statements = _statements(lambda: remote.finish_action(token=token, action_id=a,
                                                                 body={"decision": {"n": 1}}))
    assert statements == 0 and answer["committed"] is False  # a finish that hands off only stages
    b = remote.open_action(token=token, agent="staged_reader", parent=a)["action"]
    assert remote.call(token=token, action_id=b, op="get", body={"key": "faq/1"})["value"] == "one"
    effect, statements = _statements(lambda: remote.call(token=token, action_id=b, op="effect", body={
        "kind": "note", "amount": 0, "ticket": "t1", "external": True, "idempotency_key": "note-1"}))
    assert effect["perform"] is True and statements > 0
    row = Recording.objects.get(first_action=a)  # durable before the agent performs it, with what came before
    reader = next(r for r in row.state["records"] if r["id"] == b)
    assert reader["effects"][0]["kind"] == "note" and reader["reads"][0][0] == "faq/1"
    assert remote.finish_action(token=token, action_id=b, body={"decision": {"read": True}})["committed"] is True
    assert workspace_graph("staged").ro_query(queries.ACTION_COUNT)[0][0] == 2


def test_a_recording_whose_staged_calls_were_lost_is_refused_never_committed_short(token):
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 2})["action"]
    remote.call(token=token, action_id=a, op="set", body={"key": "faq/2", "value": "two"})
    staging.drop(Recording.objects.get(first_action=a))  # the staging store was emptied: the set is gone
    with pytest.raises(CallConflict, match="were lost"):
        remote.finish_action(token=token, action_id=a, body={"decision": {"n": 2}})
    assert workspace_graph("staged").ro_query(queries.ACTION_COUNT)[0][0] == 0


def test_a_locked_call_locks_its_recordings_row_only_never_the_workspaces_before_the_graph_lock(token):
    """The lock order is the graph's lock, then the workspace's row: a call that locked the workspace's row
    with its recording's (FOR UPDATE over the join) and then committed deadlocked with a flag."""
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 3})["action"]
    with CaptureQueriesContext(connection) as ctx:
        remote.describe(token=token, action_id=a)
    locking = [q["sql"] for q in ctx.captured_queries if "FOR UPDATE" in q["sql"]]
    assert locking and all('FOR UPDATE OF "provenance_recording"' in sql for sql in locking), locking


def _forget_every_copy() -> None:
    """This process as another web worker sees it: no copy of any recording."""
    with remote._cache_lock:
        remote._cache.clear()
        remote._by_action.clear()


def test_a_process_without_a_copy_stages_from_what_is_staged_with_no_postgres_statement(token):
    """A recording's calls reach every web worker: one that holds no copy of it makes one from what is
    staged (found by the action's id), not from the row under its lock."""
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 4})["action"]
    remote.call(token=token, action_id=a, op="set", body={"key": "faq/4", "value": "four"})
    _forget_every_copy()
    answer, statements = _statements(lambda: remote.call(token=token, action_id=a, op="get", body={"key": "faq/4"}))
    assert answer == {"key": "faq/4", "value": "four", "found": True} and statements == 0
    # And once the writer hands off and finishes elsewhere, its reader's first call here too.
    remote.call(token=token, action_id=a, op="handoff", body={"agent": "staged_reader", "payload": {"n": 4}})
    remote.finish_action(token=token, action_id=a, body={"decision": {"n": 4}})
    b = remote.open_action(token=token, agent="staged_reader", parent=a)["action"]
    _forget_every_copy()
    answer, statements = _statements(lambda: remote.call(token=token, action_id=b, op="get", body={"key": "faq/4"}))
    assert answer["value"] == "four" and statements == 0
    assert remote.finish_action(token=token, action_id=b, body={"decision": {"read": True}})["committed"] is True
    assert workspace_graph("staged").ro_query(queries.ACTION_COUNT)[0][0] == 2


def test_red_without_the_actions_index_a_process_without_a_copy_takes_the_rows_lock(token):
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 5})["action"]
    row = Recording.objects.get(first_action=a)
    staging._redis().delete(staging._action_key(row.workspace_id, a))
    _forget_every_copy()
    answer, statements = _statements(lambda: remote.call(token=token, action_id=a, op="set",
                                                         body={"key": "faq/5", "value": "five"}))
    assert answer["written"] is True and statements > 0


def test_a_stale_copy_is_brought_up_to_what_another_process_staged_without_reading_the_graph(token, monkeypatch):
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 6})["action"]
    remote.call(token=token, action_id=a, op="set", body={"key": "faq/6", "value": "six"})
    with remote._cache_lock:  # this process's copy, kept aside while "another process" stages a call
        pk = remote._by_action[(token.workspace_id, a)]
        kept = remote._cache.pop(pk)
    _forget_every_copy()
    remote.call(token=token, action_id=a, op="set", body={"key": "faq/6b", "value": "six b"})
    _forget_every_copy()
    remote._remember(kept[2], kept[1])  # back to the stale copy
    rebuilt = []
    monkeypatch.setattr("provenance.recording.recording_copies._on_snapshot",
                        lambda *args: rebuilt.append(1))
    assert remote.call(token=token, action_id=a, op="get", body={"key": "faq/6b"})["value"] == "six b"
    assert rebuilt == []  # caught up, not rebuilt
    staged = staging.read(Recording.objects.get(first_action=a))
    assert [w["key"] for w in staged.state["records"][0]["writes"]] == ["faq/6", "faq/6b"]


def test_a_call_of_the_open_action_writes_its_record_alone_and_what_is_staged_reads_back_whole(token):
    """A set, get or handoff stages the open action's record (`o`), not the whole recording again; what is
    read back (by another worker, or by the row's writer under its lock) is the state the copy holds."""
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 7})["action"]
    row = Recording.objects.get(first_action=a)
    redis_client, key = staging._redis(), staging._key(row)
    for op, body in (("set", {"key": "faq/7", "value": "seven"}), ("get", {"key": "faq/7"}),
                     ("handoff", {"agent": "staged_reader", "payload": {"n": 7}})):
        remote.call(token=token, action_id=a, op=op, body=body)
        assert redis_client.hexists(key, "o"), op
        assert "faq/7" not in redis_client.hget(key, "s").decode()  # the state as the open wrote it
        with remote._cache_lock:
            held = remote._cache[row.pk][2].state
        assert staging.read(row).state == held, op
    remote.finish_action(token=token, action_id=a, body={"decision": {"n": 7}})  # the whole state again
    assert not redis_client.hexists(key, "o") and "faq/7" in redis_client.hget(key, "s").decode()
    b = remote.open_action(token=token, agent="staged_reader", parent=a)["action"]  # claimed: merged
    assert remote.call(token=token, action_id=b, op="get", body={"key": "faq/7"})["value"] == "seven"


def test_a_finish_on_a_stale_copy_brings_it_up_first_and_the_locked_path_reuses_a_stale_copy(token, monkeypatch):
    """Neither a staged finish nor a call under the row's lock rebuilds a copy from the graph because
    another worker staged calls since it was made: the copy takes them."""
    a = remote.open_action(token=token, agent="staged_writer", payload={"n": 8})["action"]
    remote.call(token=token, action_id=a, op="handoff", body={"agent": "staged_reader", "payload": {"n": 8}})
    with remote._cache_lock:
        pk = remote._by_action[(token.workspace_id, a)]
        kept = remote._cache.pop(pk)
    _forget_every_copy()
    remote.call(token=token, action_id=a, op="set", body={"key": "faq/8", "value": "eight"})  # "elsewhere"
    _forget_every_copy()
    remote._remember(kept[2], kept[1])
    rebuilt = []
    on_snapshot = remote._on_snapshot
    monkeypatch.setattr("provenance.recording.recording_copies._on_snapshot",
                        lambda *args: rebuilt.append(1) or on_snapshot(*args))
    done = remote.finish_action(token=token, action_id=a, body={"decision": {"n": 8}})
    assert done["committed"] is False and rebuilt == []
    # The copy is stale again; the reader's open takes the row's lock and reuses it.
    with remote._cache_lock:
        kept = remote._cache.pop(pk)
    _forget_every_copy()
    staged = staging.read(Recording.objects.get(first_action=a))
    staging.stage(kept[2], version=staged.version, state=staged.state)  # a call staged elsewhere
    remote._remember(kept[2], kept[1])
    b = remote.open_action(token=token, agent="staged_reader", parent=a)["action"]
    assert rebuilt == []
    assert remote.call(token=token, action_id=b, op="get", body={"key": "faq/8"})["value"] == "eight"


class _Workers:
    """Two web processes' copies of recordings in this one: each call is served by the one named, with
    the copies it made itself (none, current or stale), as gunicorn's workers serve a recording's calls."""

    def __init__(self):
        self.held = {"a": ({}, {}), "b": ({}, {})}
        self.serving = "a"
        _forget_every_copy()

    def serve(self, worker: str) -> None:
        with remote._cache_lock:
            self.held[self.serving] = (dict(remote._cache), dict(remote._by_action))
            remote._cache.clear(), remote._by_action.clear()
            cache, by_action = self.held[worker]
            remote._cache.update(cache), remote._by_action.update(by_action)
        self.serving = worker


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workers=st.lists(st.sampled_from("ab"), min_size=9, max_size=9))
def test_a_recordings_calls_served_by_either_worker_record_what_one_worker_records(token, workers):
    served, n = _Workers(), len(Recording.objects.all())
    steps = iter(workers)

    def on(worker_call):
        served.serve(next(steps))
        return worker_call()

    a = on(lambda: remote.open_action(token=token, agent="staged_writer", payload={"n": n}))["action"]
    on(lambda: remote.call(token=token, action_id=a, op="set", body={"key": f"faq/{n}", "value": n}))
    on(lambda: remote.call(token=token, action_id=a, op="set", body={"key": "shared", "value": n}))
    on(lambda: remote.call(token=token, action_id=a, op="handoff",
                           body={"agent": "staged_reader", "payload": {"n": n}}))
    assert on(lambda: remote.finish_action(token=token, action_id=a, body={"decision": {"n": n}}))["next"]
    b = on(lambda: remote.open_action(token=token, agent="staged_reader", parent=a))["action"]
    assert on(lambda: remote.call(token=token, action_id=b, op="get", body={"key": f"faq/{n}"}))["value"] == n
    assert on(lambda: remote.call(token=token, action_id=b, op="get", body={"key": "shared"}))["value"] == n
    done = on(lambda: remote.finish_action(token=token, action_id=b, body={"decision": {"read": n}}))
    assert done["committed"] is True
    records = Recording.objects.get(first_action=a).state["records"]
    assert [w["key"] for w in records[0]["writes"]] == [f"faq/{n}", "shared"]
    assert [(r[0], r[2]) for r in records[1]["reads"]] == [(f"faq/{n}", a), ("shared", a)]  # the writer's versions
    assert records[0]["handoffs"] == [["staged_reader", {"n": n}]]
    _forget_every_copy()
