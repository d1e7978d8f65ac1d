"""What recording a root costs, phase by phase, in Postgres statements and FalkorDB round trips
(bench.commit_costs): a change that adds one to any phase fails here. The red cases add one on purpose,
a statement in each phase and a round trip in each commit, and must be caught."""
from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from bench import commit_costs
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.agents import agent
from provenance.graph import pipelined
from provenance.models import AgentToken, Workspace
from provenance.recording import live, remote, staging

pytestmark = pytest.mark.django_db(transaction=True)

# (Postgres statements, FalkorDB round trips) each phase costs, BEGIN and COMMIT left out; the root is
# bench.agents' (a writer with two sets and a handoff, a reader with two gets and an effect). Before the
# commit path was trimmed: the committing finish 11 statements and 4 round trips, the HTTP root 24 and 8,
# an in-process root 14 and 11 (docs/benchmarks.md).
BUDGET = {
    "open": (6, 2),  # the root's open (a handoff's: 4 statements)
    "staged call": (0, 1),  # the writer's staged finish reads the heads of the keys it wrote, of its snapshot
    "effect": (3, 0),
    "committing finish": (4, 2),  # the row; the graph's lock; the count with the run number; the row closed
    "HTTP root": (17, 6),  # its ten calls
    "in-process root": (4, 4),  # the workspace, its quarantine, the lock, the count; snapshot, keys, reads, write
}
WRITER, READER = "cost_remote_writer", "cost_remote_reader"


@agent("cost_writer")
def cost_writer(rec, p: dict) -> dict:
    rec.set(f"faq/{p['n']}", f"answer {p['n']}")
    rec.set("shared", p["n"])
    rec.handoff("cost_reader", {"n": p["n"], "ticket": f"t{p['n']}"})
    return {"n": p["n"]}


@agent("cost_reader")
def cost_reader(rec, p: dict) -> dict:
    rec.get(f"faq/{p['n']}")
    rec.get("shared")
    rec.effect("note", amount=0, ticket=p["ticket"])
    return {"read": True}


@pytest.fixture
def measure(django_user_model):
    admin = django_user_model.objects.create_superuser("coster", "c@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="costs")
    for name in (WRITER, READER):
        register_agent(workspace=ws, name=name, replay="http://127.0.0.1:9/replay", actor=admin, reason="t", via="cli")
    issued, _ = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    token = AgentToken.objects.select_related("workspace").get(pk=issued.pk)
    Workspace.objects.create(name="costs-local")
    return lambda: commit_costs.per_root(token, workspace="costs-local", writer=WRITER, reader=READER,
                                         local_writer="cost_writer", falkordb_url=settings.FALKORDB_URL)


def over_budget(costs: dict) -> dict:
    return {phase: (c.statements, c.round_trips) for phase, c in costs.items()
            if c.statements > BUDGET[phase][0] or c.round_trips > BUDGET[phase][1]}


def test_each_phase_of_a_root_stays_within_its_budget(measure):
    costs = measure()
    assert set(costs) == set(BUDGET)
    assert over_budget(costs) == {}, {phase: (c.sql, c.sent) for phase, c in costs.items()}
    # The commit's graph work: one pipeline of reads, then one write with its stamp (MULTI, the query, the
    # stamp, EXEC in one send).
    assert costs["committing finish"].sent == costs["in-process root"].sent[-2:] == ["GRAPH.RO_QUERY", "MULTI"]


def _one_more_statement(fn):
    def wrapped(*args, **kwargs):
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        return fn(*args, **kwargs)
    return wrapped


# Where each phase can be made to cost one statement more.
INJECT = {
    "open": (remote, "_allocate"),
    "staged call": (staging, "stage"),
    "effect": (remote, "apply_call"),
    "committing finish": (remote, "write_records"),
    "in-process root": (live, "write_records"),
}


@pytest.mark.parametrize("phase", list(INJECT))
def test_red_a_statement_more_in_any_phase_is_caught(measure, monkeypatch, phase):
    module, name = INJECT[phase]
    monkeypatch.setattr(module, name, _one_more_statement(getattr(module, name)))
    assert phase in over_budget(measure())  # so each budget is the phase's exact cost, not a margin


def test_red_a_commit_that_reads_or_writes_the_graph_in_more_round_trips_is_caught(measure, monkeypatch):
    """The commit's reads one by one instead of in one pipeline, and its stamp apart from its write."""
    def one_by_one(graph, queries):
        return [graph.ro_query(cypher, params) for cypher, params in queries]

    write = pipelined.write

    def stamp_apart(graph, cypher, params, *, through_action):
        write(graph, cypher, params, through_action=None)
        graph.mark_appended(through_action)

    monkeypatch.setattr(pipelined, "read", one_by_one)
    monkeypatch.setattr(pipelined, "write", stamp_apart)
    assert {"committing finish", "HTTP root", "in-process root"} <= set(over_budget(measure()))
