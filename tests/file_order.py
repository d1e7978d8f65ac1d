"""The order in which pytest-xdist hands out the test files. With --dist loadfile each worker takes whole
files in the order they were collected, so a long file handed out last keeps one worker busy while the
others stand idle. Longest first: a file's length is the sum of its selected tests' seconds in a measured
run (test_seconds.json beside this module, written by `pytest --store-test-seconds`); a test that run did
not see is estimated (a slow or bench test as a long one)."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).with_name("test_seconds.json")
# Estimates for a test the measured run did not see: typical seconds of one that starts its own processes
# (slow, bench) and of any other.
HEAVY_TEST_S, TEST_S = 20.0, 0.7


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def measured() -> dict[str, float]:
    try:
        return json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def longest_first(items: list, seconds: dict[str, float]) -> None:
    """Sort `items` (pytest items, or anything with a nodeid and get_closest_marker) file by file, longest
    file first; a file's tests keep their order, and files of equal length keep theirs."""
    length: dict[str, float] = defaultdict(float)
    first_seen: dict[str, int] = {}
    # Generated cases (the schema fuzz) share one nodeid, and its seconds are theirs together.
    sharing = Counter(item.nodeid for item in items)
    for i, item in enumerate(items):
        f = file_of(item.nodeid)
        first_seen.setdefault(f, i)
        heavy = item.get_closest_marker("slow") or item.get_closest_marker("bench")
        length[f] += seconds.get(item.nodeid, HEAVY_TEST_S if heavy else TEST_S) / sharing[item.nodeid]
    items.sort(key=lambda item: (-length[file_of(item.nodeid)], first_seen[file_of(item.nodeid)]))


class LongestFirst:
    @pytest.hookimpl(trylast=True)  # after -m and -k have deselected: only the tests that will run count
    def pytest_collection_modifyitems(self, items) -> None:
        longest_first(items, measured())


class StoreTestSeconds:
    """Adds up each test's setup, call and teardown seconds as the reports arrive (under xdist, in the
    controller) and writes them at the end of the session."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        if hasattr(session.config, "workerinput"):  # a worker: the controller has every report
            return
        SECONDS_FILE.write_text(json.dumps({t: round(s, 2) for t, s in sorted(self.seconds.items())}, indent=0) + "\n")
