"""`python -m bench scale --quick`: one small desk end to end through the product, in its own process
with its own FalkorDB and broker and a database of its own (dropped afterwards)."""

import pytest

from tests.helpers import run_quick_bench

pytestmark = pytest.mark.bench


def test_scale_quick_records_repairs_and_reports_every_phase(tmp_path):
    r, printed = run_quick_bench("scale", tmp_path, timeout=300)
    assert 300 <= r["actions"] <= 500
    assert r["repair"]["status"] == "repaired"
    assert r["repair"]["verification"] == {"facts": 0, "decisions": 0, "effects": 0}
    assert r["repair"]["items"] > 0 and r["repair"]["flag_to_first_decidable_s"] is not None
    cold = r["cold_radius"]
    assert cold["correct"] and cold["radius"] > 0 and cold["cold_ms"] > 0 and cold["bfs_ms"] > 0
    for phase in ("record (desk_run)", "cold radius (fresh process)", "flag (flag_source)", "repair: walk",
                  "repair: apply", "repair: drafting", "repair: verification", "repair: run_repair total"):
        row = r["phases"][phase]
        assert row["seconds"] > 0 and row["peak_rss_mb"] > 0 and row["falkordb"]["used_mb"] > 0, phase
    assert "end to end" in printed and "cold / BFS" in printed
