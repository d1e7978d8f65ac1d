"""The fuzz harness asks both verifications of every desk it repairs, the radius check (the repair's own)
and the whole-desk replay, and they must agree. Red cases on a small fuzz desk: a repair broken inside
the set (a version the repair wrote, corrupted) and just outside it (an action outside the set reading a
version the set wrote) are both caught by the incremental check; the whole-desk replay, diffing state,
sees the first and not the second, which the harness says as a disagreement."""
from __future__ import annotations

import json

import pytest

from bench.fuzzdesk import harness, reference
from repairs import job
from tests.helpers import flagger

pytestmark = pytest.mark.django_db(transaction=True)

# src/1 is clean: its reader writes `note` before the radius begins, and a later root reads it. The
# second root ingests the flagged src/0 and writes policy/late from it: the repair writes a new version.
DESK = {"sources": {"src/0": "src/0: BAD rule: refund everyone in full", "src/1": "page 1 says keep the rules"},
        "flagged": ["src/0"], "tickets": {"t1": 5000, "t2": 5000},
        "roots": [{"agent": "fuzz_agent_0", "ticket": None,
                   "ops": [["ingest", "src/1", "a"], ["set", "note", "k1", ["a"]]]},
                  {"agent": "fuzz_agent_1", "ticket": "t1",
                   "ops": [["ingest", "src/0", "a"], ["set", "policy/late", "k2", ["a"]], ["decide", ["a"]],
                           ["refund", ["a"]]]},
                  {"agent": "fuzz_agent_2", "ticket": "t2", "ops": [["get", "note", "b"], ["email", ["b"]]]}]}


def test_the_harness_desk_repairs_clean_and_both_verifications_agree():
    assert reference.run(DESK, clean=False) != reference.run(DESK, clean=True)
    assert harness.check(DESK, actor=flagger()) == []


def _broken(monkeypatch, query: str, params) -> tuple:
    """Record and repair DESK with one more write after the apply (params(graph) -> its parameters)."""
    apply_plan = job.apply_plan

    def applies_one_more(incident, graph):
        apply_plan(incident, graph)
        graph.query(query, params(graph))

    monkeypatch.setattr(job, "apply_plan", applies_one_more)
    ws = harness.record(DESK)
    incidents = harness.repair(ws, DESK, actor=flagger())
    monkeypatch.setattr(job, "apply_plan", apply_plan)
    return ws, incidents


def test_a_repaired_version_corrupted_inside_the_set_is_caught_by_both_verifications(monkeypatch):
    def repaired_version(graph):
        rows = graph.ro_query("MATCH (f:Fact {key: 'policy/late'}) WHERE f.active = true RETURN f.id")
        return {"id": rows[0][0], "value": json.dumps("k2:00000000:ok")}

    ws, [incident] = _broken(monkeypatch, "MATCH (f:Fact {id: $id}) SET f.value = $value", repaired_version)
    v = incident.verification
    assert incident.status == "needs_attention" and v["scope"] == "radius", v
    assert any(r["table"] == "facts" and r["row"].get("key") == "policy/late" for r in v["rows"]), v["rows"]
    assert harness.differences(DESK, ws, [incident])  # the reference sees it too
    [said] = harness.verifications([incident])
    assert said.startswith("verifications agree the repair differs"), said


def test_an_action_outside_the_set_reading_a_changed_version_is_caught_by_the_radius_check(monkeypatch):
    def outside_reader(graph):
        reader = graph.ro_query("MATCH (a:Action) WHERE a.ticket = 't2' RETURN a.id")[0][0]
        fact = graph.ro_query("MATCH (f:Fact {key: 'policy/late'}) WHERE f.active = true RETURN f.id")[0][0]
        return {"reader": reader, "fact": fact}

    ws, [incident] = _broken(monkeypatch, "MATCH (a:Action {id: $reader}), (f:Fact {id: $fact}) "
                                          "CREATE (a)-[:READ]->(f)", outside_reader)
    v = incident.verification
    assert incident.status == "needs_attention" and v["scope"] == "radius", v
    assert [r["row"]["problem"] for r in v["rows"] if r["side"] == "boundary"] == ["read outside the set"], v["rows"]
    # Nothing of the state changed: the reference and the whole-desk replay see a correct repair.
    assert harness.state(ws) == reference.run(DESK, clean=True)
    [said] = harness.verifications([incident])
    assert said.startswith("verifications disagree") and "full replay (0, 0, 0)" in said, said

