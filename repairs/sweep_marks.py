"""When the outage sweep last ran and how often it has, kept in the shared cache (cheap, every process
sees it): /readyz reports the sweep's freshness from it and /metrics exports both."""
from __future__ import annotations

import time

from django.core.cache import cache

SWEEP_LAST_RUN_KEY = "kintsugi:sweep:last_run"
SWEEP_RUNS_KEY = "kintsugi:sweep:runs"


def record_sweep_run() -> None:
    """Note that the outage sweep ran now. Best effort: the cache shares the broker's Redis server, and
    a sweep must not fail because that one is away."""
    try:
        cache.set(SWEEP_LAST_RUN_KEY, time.time(), timeout=None)
        if not cache.add(SWEEP_RUNS_KEY, 1, timeout=None):
            cache.incr(SWEEP_RUNS_KEY)
    except Exception:  # noqa: BLE001 - any cache failure only loses a freshness mark
        pass


def sweep_last_run() -> float | None:
    try:
        return cache.get(SWEEP_LAST_RUN_KEY)
    except Exception:  # noqa: BLE001
        return None


def sweep_runs() -> int:
    try:
        return int(cache.get(SWEEP_RUNS_KEY) or 0)
    except Exception:  # noqa: BLE001
        return 0
