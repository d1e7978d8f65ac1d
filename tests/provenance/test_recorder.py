import json
import time
from collections import deque
from datetime import datetime, timezone

import pytest
from django.core.management import call_command
from django.test import override_settings

from provenance.graph.graph import GraphUnavailable, workspace_graph
from provenance.models import LedgerEntry, Workspace
from provenance.recording.recorder import decision_hash
from provenance.recording.selectors import fact_as_of, fact_history, radius_actions, radius_actions_in_graph
from provenance.recording.services import desk_run, record_root

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def faq_agents():
    import tests.agents_example  # noqa: F401  (registers faq_writer / faq_reader)


def run_cli(*args):
    """Run a management command as a script would: returns (exit code, stdout, stderr)."""
    import io

    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_decision_hash_ignores_key_order_and_refuses_floats(faq_agents):
    assert decision_hash({"a": 1, "b": "x"}) == decision_hash({"b": "x", "a": 1})
    Workspace.objects.create(name="floaty")
    from provenance.agents import agent

    @agent("floaty")
    def floaty(rec, payload):
        return {"score": 0.93}

    with pytest.raises(TypeError, match="float"):
        record_root(workspace="floaty", agent="floaty", payload={})


def test_reads_create_feeds_edges_from_the_writer_at_read_time(faq_agents):
    Workspace.objects.create(name="faq")
    ids = record_root(workspace="faq", agent="faq_writer", payload={"topic": "returns", "answer": "30 days"})
    assert len(ids) == 2
    g = workspace_graph("faq")
    feeds = g.ro_query("MATCH (w:Action)-[:FEEDS]->(r:Action) RETURN w.agent, r.agent")
    handoffs = g.ro_query("MATCH (w:Action)-[:HANDED_OFF]->(r:Action) RETURN w.agent, r.agent")
    assert feeds == [["faq_writer", "faq_reader"]] and handoffs == [["faq_writer", "faq_reader"]]
    reader = g.ro_query("MATCH (a:Action {agent: 'faq_reader'}) RETURN a.decision")[0][0]
    assert json.loads(reader) == {"has_answer": True}


def test_facts_are_versioned_never_deleted_with_three_clocks(faq_agents):
    Workspace.objects.create(name="clocks")
    record_root(workspace="clocks", agent="faq_writer", payload={
        "topic": "hours", "answer": "9-17", "valid_from": "2026-04-01T00:00:00+00:00",
        "observed_at": "2026-07-01T00:00:00+00:00"})
    record_root(workspace="clocks", agent="faq_writer", payload={"topic": "hours", "answer": "8-18"})
    history = fact_history(workspace="clocks", key="faq/hours")
    assert [v["value"] for v in history] == ["9-17", "8-18"] and [v["version"] for v in history] == [1, 2]
    first = history[0]
    assert first["known_at"].startswith("2026-07-01") and first["valid_from"].startswith("2026-04-01")
    assert first["system_at"] > first["known_at"]
    may = datetime(2026, 5, 1, tzinfo=timezone.utc)
    # Valid in the world in May, but the system only learned it in July: a back-fill is not knowledge.
    assert fact_as_of(workspace="clocks", key="faq/hours", at=may, clock="valid")["value"] == "9-17"
    assert fact_as_of(workspace="clocks", key="faq/hours", at=may, clock="known") is None
    now = datetime.now(timezone.utc)
    assert fact_as_of(workspace="clocks", key="faq/hours", at=now, clock="known")["value"] == "8-18"
    # The second version's validity is unknown: it is never guessed valid.
    assert fact_as_of(workspace="clocks", key="faq/hours", at=now, clock="valid")["value"] == "9-17"


def test_blast_radius_visits_each_action_once_on_a_graph_of_diamonds():
    g = workspace_graph("diamonds")
    g.delete()
    layers, width = 30, 2
    g.query("CREATE (:Source {id: 'src'})")
    g.query("UNWIND range(0, $n) AS i CREATE (:Action {id: i, seq: toFloat(i), agent: 'x', status: 'ok'})",
            {"n": layers * width})
    g.query("MATCH (a:Action {id: 0}), (s:Source {id: 'src'}) CREATE (a)-[:INGESTED]->(s)")
    edges = [(0, 1), (0, 2)]
    for layer in range(1, layers):
        for a in range(width):
            for b in range(width):
                edges.append(((layer - 1) * width + a + 1, layer * width + b + 1))
    g.query("UNWIND $e AS e MATCH (a:Action {id: e[0]}), (b:Action {id: e[1]}) CREATE (a)-[:FEEDS]->(b)",
            {"e": [list(e) for e in edges]})
    started = time.perf_counter()
    found = [r[0] for r in radius_actions(g, "src")]
    elapsed = time.perf_counter() - started
    succ: dict[int, list[int]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    seen, queue = {0}, deque([0])
    while queue:
        for b in succ.get(queue.popleft(), []):
            if b not in seen:
                seen.add(b)
                queue.append(b)
    assert sorted(found) == sorted(seen) and len(found) == layers * width + 1
    assert radius_actions_in_graph(g, "src") == radius_actions(g, "src")
    # 2^30 paths: enumerating them would take hours; a traversal that visits each node once is instant.
    assert elapsed < 5


def test_record_command_runs_a_registered_agent_and_prints_ids(faq_agents):
    Workspace.objects.create(name="cli")
    code, out, _ = run_cli("record", "--workspace", "cli", "--agent", "faq_writer", "--payload",
                           '{"topic": "a", "answer": "b"}', "--json")
    assert code == 0 and json.loads(out)["actions"] == [1, 2]


@pytest.mark.parametrize("args,message", [
    (["record", "--workspace", "nope", "--agent", "faq_writer", "--payload", "{}"], "unknown workspace"),
    (["record", "--workspace", "cli", "--agent", "nope", "--payload", "{}"], "unknown agent"),
    (["record", "--workspace", "cli", "--agent", "faq_writer", "--payload", "{not json"], "not JSON"),
    (["record", "--workspace", "cli", "--agent", "faq_writer", "--payload", "[1]"], "JSON object"),
    (["record", "--workspace", "cli", "--agent", "faq_writer", "--payload", "{}"], "lacks the field"),
    (["blast_radius", "--workspace", "cli", "--source", "nope"], "unknown source"),
    (["desk_run", "--workspace", "cli", "--exclude-source", "nope"], "unknown source"),
    (["export_state", "--workspace", "nope"], "unknown workspace"),
])
def test_bad_input_is_one_line_on_stderr_exit_2_and_writes_nothing(faq_agents, args, message):
    Workspace.objects.create(name="cli")
    code, out, err = run_cli(*args)
    assert code == 2 and message in err and err.count("\n") == 1
    graph = workspace_graph("cli")
    assert not graph.exists() or graph.ro_query("MATCH (n) RETURN count(n)") == [[0]]
    assert Workspace.objects.get(name="cli").run_number == 0


def test_falkordb_down_is_a_clear_error_naming_the_url_and_postgres_is_untouched():
    url = "redis://127.0.0.1:1"
    with override_settings(FALKORDB_URL=url):
        with pytest.raises(GraphUnavailable, match="redis://127.0.0.1:1"):
            desk_run(workspace="down")
        code, _, err = run_cli("desk_run", "--workspace", "down2")
    assert code == 2 and "FalkorDB at redis://127.0.0.1:1 is unreachable" in err
    assert not Workspace.objects.filter(name__in=["down", "down2"]).exists()
    assert not LedgerEntry.objects.exists()
