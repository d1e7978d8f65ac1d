"""`python -m bench desk --quick`: the review desk's pages at scale, in a process of its own with its own
FalkorDB, broker and database (dropped afterwards). Asserts the report's contract and the query bound of
every work-queue page, not timings (the box is shared; `bench desk` prints and judges those)."""
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, bench_env

pytestmark = pytest.mark.bench

PAGES = ("case list, page 1", "case list, page", "search a customer (q=)", "failed deliveries (delivery=failed)",
         "a case (S", "bulk confirm, 50 cases")


def test_desk_quick_reports_each_work_queue_page_beside_its_baseline_within_the_query_bound(tmp_path):
    from bench.desk import TARGET

    out = tmp_path / "desk.json"
    # Its own home: the audit checkpoints live outside the database, and a previous run's checkpoint of a
    # chain with the same id in a database since dropped would read as a rewritten chain.
    with bench_env("bench_desk", home=tmp_path / "home") as env:
        proc = subprocess.run([sys.executable, "-m", "bench", "desk", "--quick", "--output", str(out)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads(out.read_text())["benchmarks"]["desk"]
    assert r["mode"] == "quick" and r["scale_cases"] == 1_000
    rows = r["scale"]
    assert [row["page"] for row in rows] and len(rows) == len(PAGES)
    for row, page in zip(rows, PAGES):
        assert row["page"].startswith(page), (row["page"], page)
        assert {"queries", "median_ms", "p95_ms", "meets", "baseline", "baseline_queries", "baseline_p95_ms"} <= set(row)
        assert row["p95_ms"] > 0 and row["baseline_p95_ms"] > 0 and row["baseline"]
        # The bound holds whatever the size: a page's queries do not grow with its cases.
        assert 0 < row["queries"] <= TARGET["queries"], row
    assert "Review desk at scale" in proc.stdout and "target per page" in proc.stdout
