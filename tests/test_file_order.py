"""The order the suite's files are handed out in (tests.file_order): longest first by the measured
seconds of the tests that will run, a file's tests in their own order, unmeasured tests estimated."""
import json
from types import SimpleNamespace

from tests import file_order


def _item(nodeid: str, *markers: str):
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: name if name in markers else None)


def test_files_go_longest_first_and_keep_their_tests_in_order():
    items = [_item("a.py::one"), _item("a.py::two"), _item("b.py::one"), _item("c.py::one"), _item("c.py::two")]
    file_order.longest_first(items, {"a.py::one": 1.0, "a.py::two": 1.0, "b.py::one": 30.0, "c.py::one": 5.0,
                                     "c.py::two": 0.5})
    assert [i.nodeid for i in items] == ["b.py::one", "c.py::one", "c.py::two", "a.py::one", "a.py::two"]


def test_only_the_tests_that_run_count_and_unmeasured_ones_are_estimated():
    # b.py's long test was deselected; c.py's new test starts its own processes.
    items = [_item("a.py::one"), _item("b.py::short"), _item("c.py::new", "slow")]
    file_order.longest_first(items, {"a.py::one": 3.0, "b.py::short": 0.1, "b.py::long": 90.0})
    assert [file_order.file_of(i.nodeid) for i in items] == ["c.py", "a.py", "b.py"]


def test_cases_sharing_a_nodeid_share_its_seconds():
    items = [_item("fuzz.py::ops") for _ in range(100)] + [_item("a.py::one")]
    file_order.longest_first(items, {"fuzz.py::ops": 4.0, "a.py::one": 5.0})
    assert items[0].nodeid == "a.py::one"


def test_the_stored_table_is_each_tests_setup_call_and_teardown(tmp_path, monkeypatch):
    monkeypatch.setattr(file_order, "SECONDS_FILE", tmp_path / "seconds.json")
    store = file_order.StoreTestSeconds()
    for when, seconds in (("setup", 0.5), ("call", 2.0), ("teardown", 0.25)):
        store.pytest_runtest_logreport(SimpleNamespace(nodeid="a.py::one", when=when, duration=seconds))
    store.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    assert json.loads((tmp_path / "seconds.json").read_text()) == {"a.py::one": 2.75}
    assert file_order.measured() == {"a.py::one": 2.75}


def test_a_missing_or_damaged_table_orders_by_estimates(tmp_path, monkeypatch):
    monkeypatch.setattr(file_order, "SECONDS_FILE", tmp_path / "seconds.json")
    assert file_order.measured() == {}
    (tmp_path / "seconds.json").write_text("{not json")
    assert file_order.measured() == {}
