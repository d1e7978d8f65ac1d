"""`python -m bench scale --quick`: one small desk end to end through the product, in its own process
with its own FalkorDB and broker and a database of its own (dropped afterwards)."""
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, bench_env

pytestmark = pytest.mark.bench


def test_scale_quick_records_repairs_and_reports_every_phase(tmp_path):
    out = tmp_path / "scale.json"
    with bench_env("bench_scale") as env:
        proc = subprocess.run([sys.executable, "-m", "bench", "scale", "--quick", "--output", str(out)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads(out.read_text())["benchmarks"]["scale"]
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
    assert "end to end" in proc.stdout and "cold / BFS" in proc.stdout
