"""`python -m bench restart --quick`: the embedded FalkorDB, with the product's append-only settings, killed
after a few thousand recorder-shaped actions and started again, in its own process and home. Every restart
holds every action (the bench raises otherwise), and the one right after a rewrite has no incremental
part to replay."""

import pytest

from tests.helpers import run_quick_bench

pytestmark = pytest.mark.bench


def test_restart_quick_times_both_restarts_and_each_holds_every_action(tmp_path):
    r, printed = run_quick_bench("restart", tmp_path, own_home=True, timeout=280)
    assert r["actions"] == 2000 and r["record_s"] > 0
    left, rewritten = r["as_recording_left_it"], r["right_after_a_rewrite"]
    assert left["actions_held"] == rewritten["actions_held"] == 2000
    assert left["incremental_mb"] > 0 and left["restart_s"] > 0
    assert rewritten["incremental_mb"] < 0.01 and rewritten["base_mb"] > 0 and rewritten["restart_s"] > 0
    assert "restart s" in printed
