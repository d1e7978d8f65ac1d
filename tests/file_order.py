"""The order in which pytest-xdist hands out the test files. With --dist loadfile each worker takes whole
files in the order they were collected, so a long file handed out last keeps one worker busy while the
others stand idle. Longest first: a file's length is the sum of its selected tests' seconds in a measured
run (test_seconds.json beside this module, written by `pytest --store-test-seconds`); a test that run did
not see is estimated (a slow or bench test as a long one).

The benchmarks run end to end (tests/test_bench_*.py) go to one worker, one after the other: each starts
a whole stack (web workers, a Celery worker, a browser, network namespaces) that alone keeps both cores
busy, and side by side they slowed each other down by half (the quick reviewers bench: 92 s alone on its
worker, 134 s beside the soak and the multi-host bench)."""
from __future__ import annotations

import json
from fnmatch import fnmatch
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


BENCHMARKS = "tests/test_bench_*.py"


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the benchmarks together."""
    f = file_of(nodeid)
    return BENCHMARKS if fnmatch(f, BENCHMARKS) else f


def longest_first(items: list, seconds: dict[str, float]) -> None:
    """Sort `items` (pytest items, or anything with a nodeid and get_closest_marker) unit by unit (a file,
    or the benchmarks together: scope_of), longest first; a unit's tests keep their order, and units of
    equal length keep theirs."""
    length: dict[str, float] = defaultdict(float)
    first_seen: dict[str, int] = {}
    # Generated cases (the schema fuzz) share one nodeid, and its seconds are theirs together.
    sharing = Counter(item.nodeid for item in items)
    for i, item in enumerate(items):
        unit = scope_of(item.nodeid)
        first_seen.setdefault(unit, i)
        heavy = item.get_closest_marker("slow") or item.get_closest_marker("bench")
        length[unit] += seconds.get(item.nodeid, HEAVY_TEST_S if heavy else TEST_S) / sharing[item.nodeid]
    items.sort(key=lambda item: (-length[scope_of(item.nodeid)], first_seen[scope_of(item.nodeid)]))


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


def make_scheduler(config, log):
    """--dist loadfile with the benchmarks as one unit; other modes are pytest-xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class BenchmarksTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return BenchmarksTogether(config, log)
