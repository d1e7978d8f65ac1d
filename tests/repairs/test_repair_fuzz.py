"""The repair fuzzer in the suite: random agent programs (bench.fuzzdesk.programs) recorded, flagged and
repaired, each compared with the independent reference interpreter's clean run and verified twice (the
radius check and the whole-desk replay must agree). A bounded number of examples here; `python -m bench
fuzz --minutes N` runs it long (`--http`: over the API, tests/agents/test_fuzz_over_http.py). Desks the
fuzzer once shrank to a counterexample, or written for a shape, are kept in tests/repairs/fuzz_desks/
and replayed one by one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from bench.fuzzdesk import harness, programs, reference
from tests.helpers import flagger

pytestmark = pytest.mark.django_db(transaction=True)
KEPT = sorted((Path(__file__).parent / "fuzz_desks").glob("*.json"))


def test_the_reference_runs_a_flagged_source_as_absent():
    desk = {"sources": {"src/0": "src/0: BAD rule"}, "flagged": ["src/0"], "tickets": {"t0": 5000},
            "roots": [{"agent": "fuzz_agent_0", "ticket": "t0",
                       "ops": [["fill", "policy/late", "src/0", "a"], ["decide", ["a"]], ["refund", ["a"]]]}]}
    poisoned, clean = reference.run(desk, clean=False), reference.run(desk, clean=True)
    assert poisoned["decisions"] == {"t0": "refund"} and clean["decisions"] == {"t0": "reply"}
    assert poisoned["facts"] == {"policy/late": "src/0: BAD rule"} and clean["facts"] == {}
    assert [e["amount_cents"] for e in poisoned["effects"]] != [e["amount_cents"] for e in clean["effects"]]


def test_a_recording_equals_the_reference_run_with_and_without_the_flagged_sources():
    """The harness reads kintsugi's state in the reference's terms: a desk recorded clean (its flagged
    sources' text absent from the start) must read back exactly as the reference's clean run, and
    recorded as it is, as its poisoned run (roots recorded beside each other included)."""
    for path in KEPT:
        desk = json.loads(path.read_text())
        for clean in (True, False):
            ws = harness.record(desk, clean=clean)
            assert harness.state(ws) == reference.run(desk, clean=clean), (path.name, clean)


@pytest.mark.parametrize("path", KEPT, ids=[p.stem for p in KEPT])
def test_a_kept_counterexample_repairs_to_the_reference(path):
    desk = json.loads(path.read_text())
    found = harness.check(desk, actor=flagger())
    assert not found, "\n".join(found)


# No explain phase: it traces every line a failing example runs, minutes for one repair. Up to two
# flagged sources per desk, flagged one after the other; `python -m bench fuzz` takes up to three.
@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(desk=programs.desks(max_roots=5, max_flagged=2))
def test_generated_desks_repair_to_the_reference_clean_run(desk):
    found = harness.check(desk, actor=flagger())
    assert not found, "\n".join(found) + "\n" + json.dumps(desk)
