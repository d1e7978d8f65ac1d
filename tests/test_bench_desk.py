"""`python -m bench desk --quick`: the review desk's pages at scale, in a process of its own with its own
FalkorDB, broker and database (dropped afterwards). Asserts the report's contract and the query bound of
every work-queue page, not timings (the box is shared; `bench desk` prints and judges those)."""

import pytest

from tests.helpers import run_quick_bench

pytestmark = pytest.mark.bench

PAGES = ("case list, page 1", "case list, page", "search a customer (q=)", "failed deliveries (delivery=failed)",
         "a case (S", "bulk confirm, 50 cases")


def test_desk_quick_reports_each_work_queue_page_beside_its_baseline_within_the_query_bound(tmp_path):
    from bench.desk import TARGET

    # Its own home: the audit checkpoints live outside the database, and a previous run's checkpoint of a
    # chain with the same id in a database since dropped would read as a rewritten chain.
    r, printed = run_quick_bench("desk", tmp_path, own_home=True, timeout=600)
    assert r["mode"] == "quick" and r["scale_cases"] == 1_000
    rows = r["scale"]
    assert [row["page"] for row in rows] and len(rows) == len(PAGES)
    for row, page in zip(rows, PAGES):
        assert row["page"].startswith(page), (row["page"], page)
        assert {"queries", "median_ms", "p95_ms", "meets", "baseline", "baseline_queries", "baseline_p95_ms"} <= set(row)
        assert row["p95_ms"] > 0 and row["baseline_p95_ms"] > 0 and row["baseline"]
        # The bound holds whatever the size: a page's queries do not grow with its cases.
        assert 0 < row["queries"] <= TARGET["queries"], row
    assert "Review desk at scale" in printed and "target per page" in printed
