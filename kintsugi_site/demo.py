"""`make demo`: embedded services up, canonical scenario recorded, the admin, the API and MCP (at /mcp) on
127.0.0.1:8000 through the production server (gunicorn with uvicorn workers, static files by
whitenoise) with a Celery worker and the beat in a process of its own. Every process it starts, and every
embedded store, is restarted with backoff when it dies (kintsugi_site.supervise; docs/operations.md); it
says ready once every store answers. Ctrl-C stops everything this command started; data stays under .kintsugi/."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kintsugi_site.supervise import Supervised, SupervisedStore

ROOT = Path(__file__).resolve().parent.parent
# Its trusted proxies (KINTSUGI_TRUSTED_PROXIES), not gunicorn's default of believing loopback's X-Forwarded-For.
GUNICORN_CONF = ROOT / "kintsugi_site" / "gunicorn_conf.py"


def _running_embedded() -> set[str]:
    from core import embedded

    up = set()
    if embedded._port_answers(embedded.FALKORDB_PORT):
        up.add("falkordb")
    if embedded._port_answers(embedded.BROKER_PORT):
        up.add("broker")
    if (embedded.kintsugi_home() / "postgres" / "postmaster.pid").exists():
        up.add("postgres")
    return up


# Held by the serving demo for as long as it runs (the kernel drops it when the process ends, however).
_LOCK: list[int] = []


def already_serving(*, host: str, port: int) -> str | None:
    """Why this demo must not start, or None. One demo per KINTSUGI_HOME (a lock under it, with the
    serving demo's pid), and none where something already listens on the web port: the second one would
    migrate, set up the users and print them, and then find its port taken."""
    import fcntl
    import socket
    import urllib.request

    from core import embedded

    url = f"http://{host}:{port}/admin/"
    fd = os.open(embedded.kintsugi_home() / "demo.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.read(fd, 32).decode().strip()
        os.close(fd)
        return f"a kintsugi demo already serves {url} (pid {pid}, data under {embedded.kintsugi_home()})"
    _LOCK.append(fd)
    try:
        with socket.create_connection((host, port), timeout=1):
            pass
    except OSError:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return None
    try:
        # Straight to the port: a proxy from the environment must not answer for it.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{host}:{port}/healthz", timeout=2) as answer:
            kintsugi = answer.read().strip() == b"ok"
    except OSError:
        kintsugi = False
    if kintsugi:
        return f"a kintsugi already serves {url} (another KINTSUGI_HOME's demo, or a server of its own)"
    return f"{host}:{port} is taken by another server: stop it, or serve the demo elsewhere (KINTSUGI_WEB_PORT)"


def web_server_command(py: str, *, bind: str | None = None, workers: int | None = None) -> list[str]:
    """The production server the demo runs, as a deployment would (README: "Deployment"); `bind`
    (host:port) and `workers` default to the KINTSUGI_WEB_* settings (`bench multihost` passes both)."""
    if bind is None or workers is None:
        from django.conf import settings

        bind = bind or f"{settings.KINTSUGI_WEB_HOST}:{settings.KINTSUGI_WEB_PORT}"
        workers = workers or settings.KINTSUGI_WEB_WORKERS
    return [py, "-m", "gunicorn", "kintsugi_site.asgi:application", "--config", str(GUNICORN_CONF),
            "--worker-class", "uvicorn_worker.UvicornWorker", "--workers", str(workers), "--bind", bind,
            "--graceful-timeout", "10", "--no-control-socket"]


def main() -> int:
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")
    # The demo's beat replays each workspace's whole desk nightly (docs/verification.md); "" turns it off.
    os.environ.setdefault("KINTSUGI_DEEP_CHECK_HOUR", "3")
    before = _running_embedded()
    py = sys.executable
    manage = [py, "manage.py"]
    children: list[Supervised] = []

    def shutdown(*_args) -> None:
        for child in children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.terminate()
        for child in children:
            child.stop()
        from core import embedded

        started = _running_embedded() - before
        if started:
            print(f"stopping embedded {', '.join(sorted(started))}", flush=True)
            embedded.stop_all(only=started)
        sys.exit(0)

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)

    import django

    django.setup()
    from django.conf import settings

    refusal = already_serving(host=settings.KINTSUGI_WEB_HOST, port=settings.KINTSUGI_WEB_PORT)
    if refusal:
        print(f"kintsugi demo: {refusal}", file=sys.stderr, flush=True)
        return 1
    print("kintsugi demo: starting services (data under .kintsugi/)", flush=True)
    subprocess.run(manage + ["migrate", "--noinput", "-v", "0"], check=True)
    subprocess.run(manage + ["demo_setup"], check=True)
    subprocess.run(manage + ["collectstatic", "--noinput", "-v", "0"], check=True)
    celery = [py, "-m", "celery", "-A", "kintsugi_site"]
    # Every child is restarted when it dies (a worker that lost the broker mid-acknowledgement among them).
    children.append(Supervised("celery worker", celery + ["worker", "-l", "warning", "-c", "2", "-n", "demo@%h"],
                               restart=True).start())
    # The beat in a process of its own, restarted when it dies: without it nothing heals after an outage.
    children.append(Supervised("celery beat", celery + ["beat", "-l", "warning", "-s",
                                                        settings.CELERY_BEAT_SCHEDULE_FILENAME],
                               restart=True).start())
    children.append(Supervised("web server", web_server_command(py), restart=True).start())
    stores = _stores()
    _wait_until_ready()
    print("admin: http://127.0.0.1:8000/admin/   (every store ready; Ctrl-C stops everything)", flush=True)
    while True:
        for child in [*children, *stores]:
            news = child.check()
            if news:
                print(news, flush=True)
        time.sleep(1)


def _stores() -> list[SupervisedStore]:
    """The embedded stores this demo runs on (those not configured elsewhere), watched and restarted."""
    from core import embedded

    stores = []
    if not os.environ.get("FALKORDB_URL"):
        stores.append(SupervisedStore("FalkorDB", ensure=embedded.ensure_falkordb,
                                      alive=lambda: embedded._port_held(embedded.FALKORDB_PORT)))
    if not os.environ.get("CELERY_BROKER_URL"):
        stores.append(SupervisedStore("broker", ensure=embedded.ensure_broker,
                                      alive=lambda: embedded._port_held(embedded.BROKER_PORT)))
    if not os.environ.get("DATABASE_URL"):
        stores.append(SupervisedStore("Postgres", ensure=embedded.ensure_postgres,
                                      alive=lambda: _postmaster_running(embedded.kintsugi_home() / "postgres")))
    return stores


def _postmaster_running(pgdata: Path) -> bool:
    try:
        os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def _wait_until_ready(timeout: float = 600) -> None:
    """Until every store answers (a FalkorDB loading a large append-only file takes a while): the demo
    says ready only then."""
    from provenance.graph.graph import GraphUnavailable, ping

    deadline, said = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        try:
            ping()
            return
        except GraphUnavailable as exc:
            if not said:
                print(f"waiting for FalkorDB: {str(exc).splitlines()[0]}", flush=True)
                said = True
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
