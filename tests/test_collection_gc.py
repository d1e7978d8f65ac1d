"""The cycle collector after collection (tests/conftest.py's pytest_collection): running again, with
what collecting made frozen out of its way."""
import gc


def test_the_collector_runs_after_collection_and_skips_what_collecting_made():
    assert gc.isenabled()
    assert gc.get_freeze_count() > 10_000  # the imported modules and the collected items, at the least
