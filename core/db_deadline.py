"""A web request's statement ends at its deadline even when the database server cannot end it.

`statement_timeout` (kintsugi_site.settings.deadlines) is enforced by the server: a server that is frozen
(stopped, swapped out, its disk hung) keeps the connection open, its kernel acknowledges the query, and
nothing ever answers or cancels, so the request waited as long as the freeze. In web processes every
statement on the application's connection is registered with one watchdog thread; a statement still
running a grace past the server's own deadline has its socket shut down, which ends the wait in the
request's thread with an OperationalError, answered 503 with Retry-After like any store that did not
answer (core.errors.store_unavailable). The connection is then unusable and Django replaces it.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time

log = logging.getLogger("kintsugi.db")

_GRACE_SECONDS = 2.0
_running: dict[int, tuple[float, object]] = {}  # id of the statement's frame -> (deadline, psycopg connection)
_lock = threading.Lock()
_limit_seconds = 0.0


def _cut(pg_connection) -> None:
    try:
        fd = pg_connection.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # already closed or never opened: nothing is waiting on it
        log.debug("no socket to cut", exc_info=True)


def _watch() -> None:
    while True:
        time.sleep(0.25)
        now = time.monotonic()
        with _lock:
            late = [(key, conn) for key, (deadline, conn) in _running.items() if deadline <= now]
            for key, _ in late:
                _running.pop(key, None)
        for _, conn in late:
            log.warning("a statement outlived its deadline (%.1f s) with no answer from the database: "
                        "its connection is cut", _limit_seconds)
            _cut(conn)


def _deadline(execute, sql, params, many, context):
    conn = context["connection"].connection
    key = id(context)
    with _lock:
        _running[key] = (time.monotonic() + _limit_seconds, conn)
    try:
        return execute(sql, params, many, context)
    finally:
        with _lock:
            _running.pop(key, None)


def _on_connection(sender, connection, **kwargs) -> None:
    # First in the list, not last: a connection opened inside another wrapper's context (pghistory's, for a
    # request) must not have that context's closing pop() take this one off instead of its own.
    if connection.alias == "default" and _deadline not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _deadline)


def install(statement_timeout_seconds: float) -> None:
    """Called once in a web process (KintsugiSiteConfig.ready): statements on the application's connection
    are cut `statement_timeout_seconds` and a grace after they started."""
    global _limit_seconds
    from django.db.backends.signals import connection_created

    if statement_timeout_seconds <= 0 or _limit_seconds:
        return
    _limit_seconds = statement_timeout_seconds + _GRACE_SECONDS
    connection_created.connect(_on_connection, dispatch_uid="kintsugi_db_deadline")
    threading.Thread(target=_watch, name="kintsugi-db-deadline", daemon=True).start()
