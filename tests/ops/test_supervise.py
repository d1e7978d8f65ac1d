"""The demo's supervisor restarts the beat when it dies (with a growing pause) and reports, without
restarting, a child that must not be restarted."""
from __future__ import annotations

import signal
import sys
import time

from kintsugi_site.supervise import Supervised

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        news = check()
        if news:
            return news
        time.sleep(0.05)
    return None


def test_a_restartable_child_that_dies_is_started_again():
    beat = Supervised("celery beat", SLEEPER, restart=True, backoff=0.1).start()
    try:
        first = beat.proc.pid
        assert beat.check() is None
        beat.proc.send_signal(signal.SIGKILL)
        beat.proc.wait()
        assert "restarting in 0.1 s" in beat.check()
        assert _until(beat.check) == "celery beat restarted (restart 1)"
        assert beat.proc.pid != first and beat.proc.poll() is None
        beat.proc.send_signal(signal.SIGKILL)
        beat.proc.wait()
        assert "restarting in 0.2 s" in beat.check()  # the pause doubles: a child that cannot start does not spin
    finally:
        beat.stop()


def test_a_child_that_is_not_restarted_is_reported_once_it_exits():
    web = Supervised("web server", [sys.executable, "-c", "raise SystemExit(3)"], restart=False).start()
    web.proc.wait()
    assert web.check() == "web server exited with 3"
    assert web.restarts == 0


def test_a_killed_broker_is_started_again_and_the_other_children_stay_up(tmp_path):
    import os

    from core import embedded
    from kintsugi_site.supervise import SupervisedStore
    from tests.helpers import free_port

    port, data = free_port(), tmp_path / "broker"
    first = embedded.start_redis_server(data_dir=data, port=port, with_graph=False, die_with_parent=True)
    restarted = []

    def ensure():
        restarted.append(embedded.start_redis_server(data_dir=data, port=port, with_graph=False, die_with_parent=True))

    broker = SupervisedStore("broker", alive=lambda: embedded._port_held(port), ensure=ensure, backoff=0.1)
    worker = Supervised("celery worker", SLEEPER, restart=True, backoff=0.1).start()
    try:
        assert broker.check() is None
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert "broker is down; restarting in 0.1 s" == _until(broker.check)
        assert _until(broker.check) == "broker restarted (restart 1)"
        assert embedded._port_answers(port) and restarted[0] is not None
        assert worker.check() is None and worker.restarts == 0  # untouched by the broker's restart
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()
        assert _until(worker.check) == "celery worker exited with -9; restarting in 0.1 s"
        assert _until(worker.check) == "celery worker restarted (restart 1)"
        assert broker.check() is None and broker.restarts == 1
    finally:
        worker.stop()
        for proc in restarted:
            if proc is not None:
                proc.kill()
                proc.wait()
