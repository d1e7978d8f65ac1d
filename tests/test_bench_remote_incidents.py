"""`python -m bench remote-incidents --quick`: remote agents served by kintsugi_client's replay server, their
pages flagged one after another; each incident repaired clean, and its replay calls counted for the repair,
the radius verification and the full replay. Asserts counts, not timings."""

import pytest

from tests.helpers import run_quick_bench


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_remote_incidents_quick_counts_each_incidents_replays_and_verification_stays_within_twice_the_repair(tmp_path):
    r, printed = run_quick_bench("remote-incidents", tmp_path, timeout=840)
    incidents = r["incidents"]
    assert len(incidents) == r["pages"] == 3
    for i in incidents:
        assert i["status"] == "repaired" and i["diff"] == [0, 0, 0] and i["full_diff"] == [0, 0, 0], i
        # The replay server's own count is the one kintsugi records on the incident.
        assert i["radius_calls"] == i["radius_calls_recorded"] > 0 and i["full_calls"] == i["full_calls_recorded"]
        assert 0 < i["repair_calls"] and i["radius_calls"] <= 2 * i["repair_calls"] < i["full_calls"], i
    assert r["meets_2x"] and "Remote agents, 3 incidents" in printed
