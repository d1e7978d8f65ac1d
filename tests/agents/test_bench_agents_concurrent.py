"""The concurrent rows of `bench agents`, driven against the test's live server with few clients: every
row carries the contract's keys, every root recorded lands in the graph, and with one workspace for
all clients the rows measure recording there (a refused open is retried and counted, never lost)."""
from __future__ import annotations

import pytest

from bench import agents_concurrent
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent

pytestmark = pytest.mark.django_db(transaction=True)
WRITER, READER = "bench_remote_writer", "bench_remote_reader"


def _workspaces(admin, count: int) -> list[tuple[Workspace, str]]:
    out = []
    for i in range(count):
        ws = Workspace.objects.create(name=f"bench-conc-{i}")
        for agent in (WRITER, READER):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="test", via="cli")
        out.append((ws, issue_agent_token(workspace=ws, label="b", actor=admin, reason="test", via="cli")[1]))
    return out


def _actions(ws) -> int:
    return workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0]


@pytest.mark.parametrize("same_workspace", [False, True])
def test_concurrent_rows_carry_the_contract_keys_and_every_root_lands(live_server, django_user_model,
                                                                      monkeypatch, same_workspace):
    monkeypatch.setitem(agents_concurrent.WINDOW_S, "quick", 0.5)
    monkeypatch.setattr(agents_concurrent, "BATCH_ROOTS", 2)
    admin = django_user_model.objects.create_superuser("bench-root", "b@example.com", "pass-1234-kintsugi")
    spaces = _workspaces(admin, 1 if same_workspace else 3)
    rows = agents_concurrent.run(base=live_server.url, keys=[k for _, k in spaces], writer=WRITER, reader=READER,
                                 quick=True, same_workspace=same_workspace, client_counts=(1, 3))
    assert [(r["mode"], r["clients"]) for r in rows] == [("per_call", 1), ("per_call", 3), ("batch", 1),
                                                         ("batch", 3)]
    for r in rows:
        assert {"clients", "mode", "ops_per_s", "p50_ms", "p95_ms"} <= set(r)
        assert r["ops"] > 0 and r["ops_per_s"] > 0 and 0 < r["p50_ms"] <= r["p95_ms"]
    roots = sum(r["ops"] for r in rows) // agents_concurrent.OPS_PER_ROOT
    # A writer and its reader per root: with one workspace for all, refused opens were retried, none lost.
    assert sum(_actions(ws) for ws, _ in spaces) == 2 * roots


def test_agents_thinking_at_once_in_one_workspace_take_about_as_long_as_one(live_server, django_user_model):
    """Nothing holds the workspace while an agent thinks: 4 agents of one workspace were all inside their
    open actions at one moment, all committed, none refused (the bench reports the wall time)."""
    from bench import agents_thinking

    admin = django_user_model.objects.create_superuser("bench-think", "t@example.com", "pass-1234-kintsugi")
    [(ws, key)] = _workspaces(admin, 1)
    rows = agents_thinking.run(base=live_server.url, key=key, writer=WRITER, reader=READER, agents=4, think=1.0,
                               count_roots=lambda: workspace_graph(ws.name).ro_query(
                                   "MATCH (a:Action {agent: $agent}) RETURN count(a)", {"agent": WRITER})[0][0])
    assert [r["mode"] for r in rows] == ["per_call", "calls"]
    for r in rows:
        assert r["committed"] == 4 and r["conflicts"] == 0 and r["all_open_at_once"], r
    assert _actions(ws) == 2 * (2 * 4 + 2)  # 4 agents and one alone per mode, a writer and a reader each


def test_red_agents_recording_one_at_a_time_are_never_all_open_at_once(monkeypatch):
    """The measure's red case: agents that wait for each other (a workspace held per recording) are
    reported as never all open at once."""
    import asyncio

    from bench import agents_thinking

    class Answer:
        status_code = 200

        def json(self):
            return {"action": 1}

    class Http:
        async def post(self, *args, **kwargs):
            return Answer()

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

    held = asyncio.Lock()
    root = agents_thinking._Agent.root

    async def one_at_a_time(self, n, mode, think):
        async with held:
            await root(self, n, mode, think)

    monkeypatch.setattr("httpx.AsyncClient", lambda **kw: Http())
    monkeypatch.setattr(agents_thinking._Agent, "root", one_at_a_time)
    row = asyncio.run(agents_thinking._wave("http://x", "k", WRITER, READER, 3, "calls", 0.05, 1))
    assert row["all_open_at_once"] is False
    monkeypatch.setattr(agents_thinking._Agent, "root", root)
    assert asyncio.run(agents_thinking._wave("http://x", "k", WRITER, READER, 3, "calls", 0.05, 1))["all_open_at_once"]
