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
