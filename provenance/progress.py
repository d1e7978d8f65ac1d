"""Progress reporting for long work: a bar on a terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

ProgressFn = Callable[[int, int], None]


def noop(done: int, total: int) -> None:
    return None


def throttled(write: ProgressFn, *, every: float = 0.3) -> ProgressFn:
    """`write` called at most once every `every` seconds, and always for the end (done >= total): a bar
    that moves without a write per step."""
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every:
            return
        last[0] = now
        write(done, total)

    return progress


def reporter(label: str, stream: TextIO | None = None, *, min_interval: float = 0.5) -> ProgressFn:
    stream = stream or sys.stderr
    tty = stream.isatty()
    last = [-1]

    def report(done: int, total: int) -> None:
        finished = done >= total
        pct = int(100 * done / total) if total else 100
        if tty:
            filled = pct * 30 // 100
            stream.write(f"\r{label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {pct:3d}%")
            if finished:
                stream.write("\n")
        elif pct != last[0] or finished:
            stream.write(f"{label}: {done}/{total} ({pct}%)\n")
        stream.flush()
        last[0] = pct

    return throttled(report, every=min_interval)
