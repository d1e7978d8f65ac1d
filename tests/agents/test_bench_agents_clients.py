"""The client and integration rows of `bench agents`, driven against the test's live server: each row
records its roots through its own library, every action lands in the graph, and the TypeScript row is
left out with the reason when its script is absent; with node here, the TypeScript rows record the same
writer and reader as the others, call by call and batching."""
from __future__ import annotations

import shutil

import pytest

from bench import agents_clients
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent

pytestmark = pytest.mark.django_db(transaction=True)


def _workspace(django_user_model) -> str:
    admin = django_user_model.objects.create_superuser("bench-clients", "b@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="bench-clients")
    for agent in (a for names in agents_clients.AGENTS.values() for a in names):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="test",
                       via="cli")
    return issue_agent_token(workspace=ws, label="b", actor=admin, reason="test", via="cli")[1]


def test_client_rows_record_every_root_through_their_library(live_server, django_user_model, monkeypatch, tmp_path):
    monkeypatch.setattr(agents_clients, "TS_SCRIPT", tmp_path / "record.mjs")  # absent: no TypeScript row
    key = _workspace(django_user_model)

    rows, notes, out = agents_clients.run(base=live_server.url, key=key, roots=2, ops_per_root=8, base_ops_per_s=1.0)
    assert [r[0] for r in rows] == [f"{label}, {mode}" for label in (
        "LangGraph GraphDesk", "Agents SDK AgentDesk", "Python client, set+get roots") for mode in ("call by call", "batching")]
    assert [(r[1], r[2]) for r in rows] == [(2, 16), (2, 16), (2, 16), (2, 16), (2, 4), (2, 4)]
    assert {"langgraph_s", "langgraph_batched_s", "agents_sdk_s", "agents_sdk_batched_s", "py_setget_s",
            "py_setget_batched_s"} <= set(out)
    assert all(r[3] > 0 and r[4] > 0 for r in rows)
    assert len(notes) == 1 and notes[0].startswith("TypeScript: no row (no ") and notes[0].endswith("record.mjs)")
    # Each row ran a warm-up root and two timed ones: writer+reader for the frameworks, one action for set+get.
    assert workspace_graph("bench-clients").ro_query(queries.ACTION_COUNT)[0][0] == 2 * (3 * 2 + 3 * 2 + 3)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_typescript_rows_record_the_writer_and_its_reader_in_node(live_server, django_user_model):
    key = _workspace(django_user_model)
    for buffer in (0, 64):
        seconds, note = agents_clients._typescript(live_server.url, key, 2, buffer=buffer)
        assert seconds and seconds > 0, note
    # Two roots in each mode, each a writer and the reader it handed off to.
    assert workspace_graph("bench-clients").ro_query(queries.ACTION_COUNT)[0][0] == 2 * 2 * 2
