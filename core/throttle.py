"""Per-user request budgets outside DRF (the admin's report downloads), counted in the shared cache."""
from __future__ import annotations

import time

from django.core.cache import cache

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """"30/min" → (30, 60): DRF's rate notation, so one setting style serves both."""
    count, period = rate.split("/")
    return int(count), _PERIODS[period.strip()[0]]


def wait_seconds(*, scope: str, user, rate: str) -> int | None:
    """Count one request of `user` in `scope`; None while within `rate`, else seconds until the budget
    refills. A fixed window with an atomic INCR: exact across processes, unlike a read-then-write."""
    limit, period = parse_rate(rate)
    now = time.time()
    window = int(now // period)
    key = f"throttle:{scope}:{user.pk}:{window}"
    cache.add(key, 0, timeout=period + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=period + 1)
        count = 1
    if count <= limit:
        return None
    return max(1, int((window + 1) * period - now))
