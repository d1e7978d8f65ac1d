"""Sending work to the Celery workers, where a broker that refuses is an answer, not a crash: the caller
says what a refusal means (the incident is blocked with the reason, this worker does the piece itself,
the page says the what-if could not start, the approved item waits for the next sweep)."""
from __future__ import annotations

import logging

log = logging.getLogger("kintsugi.broker")


def send(task, *args, what: str, **options) -> Exception | None:
    """Send `task` with `args` (and apply_async's `options`). None when the broker took it; otherwise the
    broker's error, logged with `what` was being sent."""
    try:
        task.apply_async(args, **options)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the caller decides what it means
        log.warning("could not send %s to a worker: %s", what, exc)
        return exc
    return None
