"""Which servers and workers the test session started are still running (psutil over its children)."""
from __future__ import annotations

import time

import psutil

WATCHED = ("redis-server", "celery")


def _watched(proc: psutil.Process) -> str | None:
    try:
        cmdline = " ".join(proc.cmdline())
        name = proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if proc.status() == psutil.STATUS_ZOMBIE:
        return None
    for word in WATCHED:
        if word in name or word in cmdline:
            return f"{word} pid {proc.pid}: {cmdline[:120]}"
    return None


def leftover_children(*, keep: set[int] = frozenset()) -> dict[int, str]:
    """Descendants of this process that are redis-servers or Celery workers, except the `keep` pids."""
    found = {}
    for child in psutil.Process().children(recursive=True):
        if child.pid in keep:
            continue
        label = _watched(child)
        if label:
            found[child.pid] = label
    return found


def stop_leftovers(*, keep: set[int] = frozenset(), grace: float = 5.0) -> list[str]:
    """Give leftovers `grace` seconds to end on their own, then kill them; returns what was left."""
    deadline = time.monotonic() + grace
    left = leftover_children(keep=keep)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_children(keep=keep)
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    return sorted(left.values())
