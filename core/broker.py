"""Sending work to the Celery workers, where a broker that refuses is an answer, not a crash: the caller
says what a refusal means (the incident is blocked with the reason, this worker does the piece itself,
the page says the what-if could not start, the approved item waits for the next sweep).

A send has a deadline (KINTSUGI_BROKER_SEND_DEADLINE_SECONDS): a frozen broker accepts the connection and
never answers, and a request that sends (an approval, a flag) must answer at once whatever the broker
does. The send goes on in the background past it; whatever it ends with, the caller has already treated
the task as not sent, and what was not sent is sent by the outage sweep, which is safe to repeat."""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as DeadlinePassed

log = logging.getLogger("kintsugi.broker")

# A few senders are enough: past the deadline one is lost until the broker's own socket timeout frees it.
# One pool per process: a forked child (a worker's pool process, a web worker) inherits the parent's pool
# object but not its threads, and work given to it would never run.
_senders: tuple[int, ThreadPoolExecutor] | None = None


def _pool() -> ThreadPoolExecutor:
    global _senders
    if _senders is None or _senders[0] != os.getpid():
        _senders = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="broker-send"))
    return _senders[1]


def send_deadline() -> float:
    from django.conf import settings

    return float(getattr(settings, "KINTSUGI_BROKER_SEND_DEADLINE_SECONDS", 1.0))


def send(task, *args, what: str, **options) -> Exception | None:
    """Send `task` with `args` (and apply_async's `options`). None when the broker took it within the
    deadline; otherwise the broker's error (or TimeoutError), logged with `what` was being sent."""
    try:
        if task.app.conf.task_always_eager:  # runs the task here, in this thread's transaction
            task.apply_async(args, **options)
        else:
            deadline = send_deadline()
            future = _pool().submit(task.apply_async, args, **options)
            try:
                future.result(timeout=deadline)
            except DeadlinePassed:
                raise TimeoutError(f"the broker did not take it within {deadline:g} s") from None
    except Exception as exc:  # noqa: BLE001 - any broker failure: the caller decides what it means
        log.warning("could not send %s to a worker: %s", what, exc)
        return exc
    return None


def closed_channel_is_a_lost_connection() -> None:
    """A worker that acknowledges a task on a channel whose broker connection was closed under it (the
    broker was killed, the worker reconnected with a new connection, then the task ended) reaches kombu's
    Redis transport with no connection left: it raised AttributeError ('NoneType' object has no attribute
    'hostname'), which Celery counts as an unrecoverable error and the worker died. Said as what it is, a
    lost connection, it is one Celery logs and recovers from (the unacknowledged task is delivered again,
    and the tasks are safe to run twice). Installed once, by kintsugi_site.celery."""
    import redis
    from kombu.transport import redis as transport

    original = transport.Channel._connparams
    if getattr(original, "closed_channel_is_a_lost_connection", False):
        return

    def _connparams(self, asynchronous=False):
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection of this channel was closed")
        return original(self, asynchronous=asynchronous)
    _connparams.closed_channel_is_a_lost_connection, _connparams.unpatched = True, original
    transport.Channel._connparams = _connparams
