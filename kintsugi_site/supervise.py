"""The demo keeps every process it starts alive: a child (web server, worker, beat) that dies is restarted
with backoff and logged, and so is an embedded store (broker, FalkorDB, Postgres) that stops answering
and no longer holds its port. Only Ctrl-C or SIGTERM stops the whole."""
from __future__ import annotations

import subprocess
import time


class Supervised:
    """`argv` run as a child; `check()` restarts it after it exits when `restart` is set (waiting
    `backoff` seconds between restarts, doubling up to `max_backoff`, so a child that cannot start does
    not spin)."""

    def __init__(self, name: str, argv: list[str], *, restart: bool, backoff: float = 1.0, max_backoff: float = 30.0):
        self.name, self.argv, self.restart = name, argv, restart
        self.backoff, self.max_backoff = backoff, max_backoff
        self.proc: subprocess.Popen | None = None
        self.restarts, self._next_start, self._wait = 0, 0.0, backoff

    def start(self) -> "Supervised":
        self.proc = subprocess.Popen(self.argv)
        return self

    def check(self) -> str | None:
        """None while the child runs; otherwise what happened: restarted (or waiting to be), or exited
        for good when it is not restarted."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        if not self.restart:
            return f"{self.name} exited with {code}"
        now = time.monotonic()
        if not self._next_start:
            self._next_start = now + self._wait
            return f"{self.name} exited with {code}; restarting in {self._wait:g} s"
        if now < self._next_start:
            return None
        self._next_start, self._wait = 0.0, min(self._wait * 2, self.max_backoff)
        self.restarts += 1
        self.start()
        return f"{self.name} restarted (restart {self.restarts})"

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class SupervisedStore:
    """An embedded store started through `ensure` (core.embedded.ensure_*): `check()` starts it again once
    `alive()` says it is gone, with the same doubling backoff as Supervised. A store that is frozen or
    still loading holds its port and is left alone (ensure refuses to start a second one beside it)."""

    def __init__(self, name: str, *, alive, ensure, backoff: float = 1.0, max_backoff: float = 30.0):
        self.name, self.alive, self.ensure = name, alive, ensure
        self.backoff, self.max_backoff = backoff, max_backoff
        self.restarts, self._next_start, self._wait = 0, 0.0, backoff

    def check(self) -> str | None:
        if self.alive():
            self._wait = self.backoff
            return None
        now = time.monotonic()
        if not self._next_start:
            self._next_start = now + self._wait
            return f"{self.name} is down; restarting in {self._wait:g} s"
        if now < self._next_start:
            return None
        self._next_start, self._wait = 0.0, min(self._wait * 2, self.max_backoff)
        try:
            self.ensure()
        except Exception as exc:  # noqa: BLE001 - said and tried again after the backoff
            return f"{self.name} did not start again: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        self.restarts += 1
        return f"{self.name} restarted (restart {self.restarts})"
