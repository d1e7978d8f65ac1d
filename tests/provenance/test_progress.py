"""provenance.progress.throttled: the one throttle of every progress bar the product writes (the job's
walk, a part's walk, the what-if page, the CLI's reporter)."""
import io

from provenance import progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_writes_at_most_once_per_interval_and_always_the_end(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    written = []
    bar = progress.throttled(lambda done, total: written.append((done, total)), every=0.3)
    bar(1, 10)            # the first step is written
    clock.now += 0.1
    bar(2, 10)            # too soon
    clock.now += 0.25
    bar(3, 10)            # 0.35 s after the last write
    clock.now += 0.01
    bar(10, 10)           # the end, however soon
    assert written == [(1, 10), (3, 10), (10, 10)]


def test_the_reporter_prints_through_the_same_throttle(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    report = progress.reporter("walk", out, min_interval=0.5)
    report(1, 4)
    clock.now += 0.1
    report(2, 4)          # too soon: not printed
    clock.now += 0.6
    report(3, 4)
    report(4, 4)          # the end
    assert out.getvalue().splitlines() == ["walk: 1/4 (25%)", "walk: 3/4 (75%)", "walk: 4/4 (100%)"]
