"""The client's HTTP connections: kept open and reused from request to request (keep-alive), one per
thread for each server, and the rule for the only cases a request is ever sent twice.

Why: a new TCP connection (and TLS handshake) for every request costs the server more than many of the
requests themselves; `bench agents` measured the web workers' CPU per recorded op about halved for a
client that keeps its connection open (docs/benchmarks.md).

Each thread has its own connections (threading.local), one per (scheme, host, port, proxy): the agent's
thread, the recorder's background sender, each replay's handler. A thread's requests go one after
another, so a connection never carries two at once. A forked child opens its own (a socket shared with
the parent would mix the two processes' answers).

Sending again, and when not. A server closes a connection that stays idle (gunicorn after 2 s by
default), and a request can meet a connection the server is closing. A recording call is not
idempotent in general: a set, a get (it records a read), a handoff, a finish, opening an action, the
several-calls and batch forms each record something, so sent twice they are recorded twice. So:

1. Before a request goes on a connection that carried earlier ones, the connection is dropped if it has
   been idle `keep_alive` seconds or more (ahead of the server's own timeout, so the request does not
   race it), or if the server already closed it (its socket is readable while no answer is due: the end
   of the stream, a reset, or bytes nobody asked for). The request goes on a new connection; nothing of
   it was sent, so this is not a retry.
2. Sending fails with a reset or a broken pipe on a reused connection: the whole request never left
   (http.client writes the head and the body apart, and the body's write meets the reset the head
   drew from a closed connection), and kintsugi reads a request's whole body before any view runs, so
   it was not run. It is sent once more, on a new connection.
3. The whole request left on a reused connection and the server closed the connection without an answer
   (RemoteDisconnected, a reset, a TLS end of stream). Either the server closed it idle as the request
   arrived (not run), or the server died while running it (maybe run, maybe recorded): the client cannot
   tell which. The request is sent once more only if running it twice leaves what running it once does:
   a GET or HEAD; a single `effect` call (the protocol records one effect per idempotency key in an
   action and answers the same key again with that effect); a compensation's ack (the same answer again
   returns the first). Anything else raises urllib.error.URLError: it may have been recorded, and only
   the caller can tell (reading the state, or abandoning the recording).
4. Nothing else is sent again: a new connection that fails, a refused connection, TLS failures, a
   timeout (the server may still be running it), an answer cut short after its first byte. Each raises
   urllib.error.URLError with the cause as `reason`, as urllib.request.urlopen did.

At most one retry (rules 2 and 3), always on a new connection. This is Go net/http's rule (a request on
a reused connection is retried if none of it was written, or if it is idempotent), with the protocol's
idempotency keys saying what is idempotent. `keep_alive=0` opens a connection per request (`Connection:
close`), as the client did before.

What urlopen did and this keeps: TLS with Python's default context (certificates and host names verified;
SSL_CERT_FILE and SSL_CERT_DIR honoured); the proxies of the environment (HTTP_PROXY, HTTPS_PROXY,
NO_PROXY, through urllib.request.getproxies and proxy_bypass): an http URL goes to the proxy with the
absolute URL, an https one through a CONNECT tunnel, credentials in the proxy URL as Basic
Proxy-Authorization; the timeout on connecting and on every read. What changed: a redirect is not
followed (urlopen followed one for a GET, and sent the token on to wherever it pointed); it is answered
as any other status that is not 2xx, a KintsugiError naming the Location.
"""
from __future__ import annotations

import base64
import http.client
import os
import re
import select
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from email.message import Message
from urllib.parse import unquote, urlsplit

__all__ = ["KEEP_ALIVE", "close_connections", "exchange", "idempotent"]

# Seconds a connection may sit idle and still carry the next request: below gunicorn's default
# keep-alive timeout (2 s), so a request does not meet the server closing it.
KEEP_ALIVE = 1.0
USER_AGENT = f"kintsugi-client (Python {sys.version_info[0]}.{sys.version_info[1]} http.client)"

_EFFECT = re.compile(r"/api/v1/recording/actions/\d+/effect/?$")
_ACK = re.compile(r"/api/v1/recording/compensations/\d+/ack/?$")
# No answer came on a connection the whole request left on: rule 3.
_NO_ANSWER = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
# Sending failed before the whole request left: rule 2.
_NOT_SENT = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, ssl.SSLEOFError)

_local = threading.local()


def idempotent(method: str, path: str, body) -> bool:
    """Whether sending this request twice records what sending it once does (rule 3)."""
    if method in ("GET", "HEAD"):
        return True
    path = path.split("?", 1)[0]
    if method == "POST" and _EFFECT.search(path):
        return isinstance(body, dict) and bool(body.get("idempotency_key"))
    return method == "POST" and bool(_ACK.search(path))


class _Route:
    """Where a URL's requests go: the connection's key, how to open one, the request target, and the
    headers a proxy needs on each request."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        scheme, host, port = parts.scheme.lower(), parts.hostname or "", parts.port
        if scheme not in ("http", "https") or not host:
            raise urllib.error.URLError(f"unknown url type or no host: {url!r}")
        port = port or (443 if scheme == "https" else 80)
        self.scheme, self.host, self.port = scheme, host, port
        self.target = parts.path or "/"
        if parts.query:
            self.target += "?" + parts.query
        self.headers: dict[str, str] = {}
        self.proxy: tuple[str, int, str | None] | None = None
        proxy_url = urllib.request.getproxies().get(scheme)
        if proxy_url and not urllib.request.proxy_bypass(parts.netloc):
            self.proxy = _proxy(proxy_url)
            if scheme == "http":  # the proxy gets the absolute URL; a CONNECT tunnel carries https
                self.target = f"http://{parts.netloc}{self.target}"
                if self.proxy[2]:
                    self.headers["Proxy-Authorization"] = self.proxy[2]
        self.key = (scheme, host, port, self.proxy)

    def open(self, timeout: float) -> http.client.HTTPConnection:
        if self.proxy is None:
            if self.scheme == "https":
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        proxy_host, proxy_port, auth = self.proxy
        if self.scheme == "http":
            return http.client.HTTPConnection(proxy_host, proxy_port, timeout=timeout)
        conn = http.client.HTTPSConnection(proxy_host, proxy_port, timeout=timeout)
        conn.set_tunnel(self.host, self.port, headers={"Proxy-Authorization": auth} if auth else None)
        return conn


def _proxy(url: str) -> tuple[str, int, str | None]:
    """(host, port, Proxy-Authorization value or None) of a proxy URL as urllib reads it from the environment."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    auth = None
    if parts.username is not None and parts.password is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password)}".encode()
        auth = "Basic " + base64.b64encode(pair).decode("ascii")
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80), auth


def _pool() -> dict:
    pool = getattr(_local, "pool", None)
    if pool is None or _local.pid != os.getpid():
        # A forked child leaves the parent's sockets alone (not closed: the parent still uses them).
        _local.pool, _local.pid = {}, os.getpid()
    return _local.pool


def close_connections() -> None:
    """Close this thread's open connections (each is opened again by its next request)."""
    pool = _pool()
    for conn, _ in pool.values():
        conn.close()
    pool.clear()


def _readable(sock) -> bool:
    """Whether an idle connection's socket has something to read: closed by the server, or junk."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _connection(route: _Route, timeout: float, keep_alive: float) -> tuple[http.client.HTTPConnection, bool]:
    """This thread's connection for `route` and whether it carried a request before (rule 1 applied)."""
    pool = _pool()
    entry = pool.pop(route.key, None)
    if entry is not None:
        conn, idle_since = entry
        if conn.sock is not None and time.monotonic() - idle_since < keep_alive and not _readable(conn.sock):
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True
        conn.close()
    return route.open(timeout), False


def exchange(method: str, url: str, body: bytes | None, headers: dict[str, str], *, timeout: float,
             keep_alive: float = KEEP_ALIVE, replayable: bool = False) -> tuple[int, Message, bytes]:
    """Send one request and read its whole answer: (status, headers, body). `replayable`: sending it
    twice records what sending it once does (rule 3). urllib.error.URLError when no answer came."""
    route = _Route(url)
    headers = {"User-Agent": USER_AGENT, **headers, **route.headers}
    if keep_alive <= 0:
        headers["Connection"] = "close"
    for attempt in (1, 2):
        conn, reused = _connection(route, timeout, keep_alive)
        retry = reused and attempt == 1
        try:
            conn.request(method, route.target, body=body, headers=headers)
        except _NOT_SENT as exc:
            conn.close()
            if retry:
                continue  # rule 2: the whole request never left
            raise urllib.error.URLError(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise urllib.error.URLError(exc) from exc
        try:
            response = conn.getresponse()
        except _NO_ANSWER as exc:
            conn.close()
            if retry and replayable:
                continue  # rule 3: sent again only what is the same sent twice
            raise urllib.error.URLError(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise urllib.error.URLError(exc) from exc
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise urllib.error.URLError(exc) from exc
        if keep_alive > 0 and conn.sock is not None:
            _pool()[route.key] = (conn, time.monotonic())
        else:
            conn.close()
        return response.status, response.msg, data
    raise AssertionError("unreachable: the second attempt returns or raises")
