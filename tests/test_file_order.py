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


def test_the_benchmarks_are_one_unit_of_work_and_every_other_file_its_own():
    assert file_order.scope_of("tests/test_bench_soak.py::test_soak") == file_order.BENCHMARKS
    assert file_order.scope_of("tests/test_bench_multihost.py::test_x[1]") == file_order.BENCHMARKS
    assert file_order.scope_of("tests/agents/test_bench_agents_concurrent.py::test_y") == \
        "tests/agents/test_bench_agents_concurrent.py"
    assert file_order.scope_of("tests/live/test_concurrent_desks.py::test_z") == "tests/live/test_concurrent_desks.py"


def test_loadfile_runs_the_benchmarks_on_one_worker_and_other_modes_are_left_alone():
    config = SimpleNamespace(getvalue=lambda name: "loadfile", option=SimpleNamespace(), getoption=lambda *a, **k: None)
    scheduler = file_order.make_scheduler(SimpleNamespace(getvalue=lambda name: "load"), log=None)
    assert scheduler is None
    scheduler = file_order.make_scheduler(config, log=None)
    assert scheduler._split_scope("tests/test_bench_desk.py::test_d") == file_order.BENCHMARKS
    assert scheduler._split_scope("tests/test_flush.py::test_f") == "tests/test_flush.py"


def test_the_benchmarks_are_ordered_as_one_unit():
    items = [_item("tests/a.py::one"), _item("tests/test_bench_x.py::x", "bench"), _item("tests/b.py::one"),
             _item("tests/test_bench_y.py::y", "bench")]
    file_order.longest_first(items, {"tests/a.py::one": 50.0, "tests/test_bench_x.py::x": 30.0,
                                     "tests/b.py::one": 40.0, "tests/test_bench_y.py::y": 30.0})
    assert [i.nodeid for i in items] == ["tests/test_bench_x.py::x", "tests/test_bench_y.py::y", "tests/a.py::one",
                                         "tests/b.py::one"]
