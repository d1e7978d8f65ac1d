"""One contract for every client and framework integration that records over HTTP: the Python client, the
TypeScript client (node), the LangGraph integration (a node's store) and the Agents SDK integration (the
model's tool calls). Each runs in a process of its own (batching_driver.py / .mjs) through a proxy that
notes every request, and holds back the calls whose answer the agent does not use:

- they ride with the action's next call that needs an answer, and with the finish that commits;
- what is held when the process ends is sent then (Python atexit, Node beforeExit): another process can
  finish the action, and the commit is not short of it;
- a held call kintsugi refuses surfaces at the action's next call (the agent goes no further) or, with no
  call after it, at the commit, and nothing of the recording is committed;
- a full buffer is sent at once, and the agent waits before filling the next one until the one before
  has landed: the buffer is bounded.

The red cases are kept: a client that drops what it holds at exit fails the exit check, and a client
that queues full buffers without waiting fails the backpressure check."""
from __future__ import annotations

import itertools
import json
import shutil

import pytest

from kintsugi_client import Client
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from tests.agents import batching_harness
from tests.agents.batching_harness import Proxy

pytestmark = pytest.mark.django_db(transaction=True)

NEEDS_NODE = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
KINDS = ["python", pytest.param("typescript", marks=NEEDS_NODE), "langgraph", "agents_sdk"]
FLOW = [["set", "a"], ["set", "b"], ["get", "a"], ["set", "c"]]
SIX = [["set", f"p{n}"] for n in range(6)]


class Harness:
    """Each run in a workspace of its own, with `bc_writer` registered and a recording token."""

    def __init__(self, live_server, admin):
        self.base, self.admin = live_server.url, admin
        self.proxy = Proxy(live_server.url)
        self._names = itertools.count()
        self.runs: list[batching_harness.Run] = []

    def start(self, kind: str, mode: str, script: list, **options) -> tuple[str, str, batching_harness.Run]:
        ws = Workspace.objects.create(name=f"bc-{kind}-{next(self._names)}")
        register_agent(workspace=ws, name="bc_writer", replay="http://127.0.0.1:9/replay", actor=self.admin,
                       reason="test", via="cli")
        key = issue_agent_token(workspace=ws, label="bc", actor=self.admin, reason="test", via="cli")[1]
        self.proxy.reset()
        self.runs.append(batching_harness.start(kind, mode, self.proxy.url, key, script, **options))
        return ws.name, key, self.runs[-1]

    def close(self) -> None:
        self.proxy.close()
        for run in self.runs:  # a red case's broken driver may still be running
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait(timeout=30)


@pytest.fixture
def harness(live_server, django_user_model):
    admin = django_user_model.objects.create_superuser("bc-admin", "bc@example.com", "pass-1234-kintsugi")
    made = Harness(live_server, admin)
    yield made
    made.close()


def facts(workspace: str) -> dict:
    rows = workspace_graph(workspace).ro_query("MATCH (f:Fact) WHERE f.active RETURN f.key, f.value")
    return {key: json.loads(value) for key, value in rows}


def committed_actions(workspace: str) -> int:
    return workspace_graph(workspace).ro_query(queries.ACTION_COUNT)[0][0]


# --- the checks, each the same for every client, and for the red cases' broken ones ---

def check_flushed_at_the_next_answer_and_at_the_commit(h: Harness, kind: str) -> None:
    ws, _, run = h.start(kind, "root", FLOW)
    run.finish()
    assert run.last("ids"), run.lines
    # The two sets ride with the get (which reads what the first wrote); the last set with the finish.
    assert h.proxy.requests() == [("actions", None), ("calls", ["set", "set", "get"]), ("calls", ["set", "finish"])]
    assert run.got() == [{"v": "a"}]
    assert facts(ws) == {f"bc/{k}": {"v": k} for k in "abc"}


def check_flushed_at_exit(h: Harness, kind: str, *, variant: str | None = None) -> None:
    ws, key, run = h.start(kind, "exit", FLOW, variant=variant)
    action = run.finish().last("action")
    assert action, run.lines
    # Another process finishes the action the driver left open: the commit holds every call it made.
    answer = Client(h.base, key, buffer=0).call(action, "finish", {"decision": {"ops": len(FLOW)}})
    assert answer["committed"]
    assert facts(ws) == {f"bc/{k}": {"v": k} for k in "abc"}, "a call held back at exit was lost"
    assert h.proxy.requests() == [("actions", None), ("calls", ["set", "set", "get"]), ("calls", ["set"])]


def check_refusal(h: Harness, kind: str, script: list, requests: list) -> None:
    ws, _, run = h.start(kind, "root", script)
    run.finish()
    error = run.last("error")
    assert error and error["status"] == 400 and error["details"]["call"] == 1 and error["details"]["op"] == "set", \
        run.lines
    # The refusal came back with the first request after the refused call, and the agent went no further.
    assert run.done() == 2 and run.got() == [], run.lines
    assert h.proxy.requests() == requests and h.proxy.statuses()[-1] == 400
    assert committed_actions(ws) == 0 and facts(ws) == {}


def check_backpressure(h: Harness, kind: str, *, variant: str | None = None) -> None:
    h.proxy.hold()  # the first full buffer reaches kintsugi only when released
    ws, _, run = h.start(kind, "root", SIX, buffer=2, variant=variant)
    try:
        run.until(lambda r: h.proxy.held.is_set() and r.done() >= 3)
        run.read(2.0)  # time for an agent nothing holds to go on
        # Two sent (held at the gate), one more held: the fourth set waits for the first two to land.
        assert run.done() == 3, f"the agent went on while its buffer could not be sent: {run.lines}"
    finally:
        h.proxy.release()
    run.finish()
    assert run.last("ids"), run.lines
    assert h.proxy.requests() == [("actions", None), *[("calls", ["set", "set"])] * 3, ("finish", None)]
    assert facts(ws) == {f"bc/p{n}": {"v": f"p{n}"} for n in range(6)}


# --- the contract, for every client and integration ---

@pytest.mark.parametrize("kind", KINDS)
def test_held_calls_ride_with_the_next_call_that_needs_an_answer_and_with_the_commit(harness, kind):
    check_flushed_at_the_next_answer_and_at_the_commit(harness, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_calls_held_when_the_process_ends_are_sent_then_and_the_commit_holds_them(harness, kind):
    check_flushed_at_exit(harness, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_held_call_surfaces_at_the_next_call_and_nothing_is_committed(harness, kind):
    check_refusal(harness, kind, [["set", "a"], ["set", "BAD"], ["get", "a"], ["set", "c"]],
                  [("actions", None), ("calls", ["set", "set", "get"])])


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_held_call_with_no_call_after_it_makes_the_commit_raise_and_nothing_is_committed(harness, kind):
    check_refusal(harness, kind, [["set", "a"], ["set", "BAD"]], [("actions", None), ("calls", ["set", "set", "finish"])])


@pytest.mark.parametrize("kind", KINDS)
def test_a_full_buffer_holds_the_agent_until_the_buffer_before_it_has_landed(harness, kind):
    check_backpressure(harness, kind)


@NEEDS_NODE
def test_node_names_what_process_exit_left_unsent_and_flush_held_sends_it_first(harness):
    # process.exit() leaves Node no turn of its event loop to send in: the loss is said, not silent...
    _, _, run = harness.start("typescript", "exit", FLOW, variant="exit-now")
    assert "1 held-back call(s) of action" in run.finish().stderr() and "never sent" in run.stderr()
    # ...and flushHeld() before it keeps the contract.
    check_flushed_at_exit(harness, "typescript", variant="flush-then-exit")


# --- the red cases: a broken client fails the same checks ---

@pytest.mark.parametrize("kind", KINDS)
def test_a_client_that_drops_what_it_holds_at_exit_fails_the_exit_check(harness, kind):
    with pytest.raises(AssertionError, match="lost"):
        check_flushed_at_exit(harness, kind, variant="drop-at-exit")


def test_a_client_that_queues_full_buffers_without_waiting_fails_the_backpressure_check(harness):
    with pytest.raises(AssertionError, match="went on"):
        check_backpressure(harness, "python", variant="no-backpressure")
