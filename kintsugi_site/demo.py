"""`make demo`: embedded services up, canonical scenario recorded, the admin, the API and MCP (at /mcp) on
127.0.0.1:8000 through the production server (gunicorn with uvicorn workers, static files by
whitenoise) with a Celery worker that also runs the beat schedule (its sweep resumes whatever an outage
stopped). Ctrl-C stops everything this command started; data stays under .kintsugi/."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def web_server_command(py: str, *, bind: str | None = None, workers: int | None = None) -> list[str]:
    """The production server the demo runs, as a deployment would (README: "Deployment"); `bind`
    (host:port) and `workers` default to the KINTSUGI_WEB_* settings (`bench multihost` passes both)."""
    if bind is None or workers is None:
        from django.conf import settings

        bind = bind or f"{settings.KINTSUGI_WEB_HOST}:{settings.KINTSUGI_WEB_PORT}"
        workers = workers or settings.KINTSUGI_WEB_WORKERS
    return [py, "-m", "gunicorn", "kintsugi_site.asgi:application", "--worker-class", "uvicorn_worker.UvicornWorker",
            "--workers", str(workers), "--bind", bind, "--graceful-timeout", "10", "--no-control-socket"]


def main() -> int:
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")
    before = _running_embedded()
    py = sys.executable
    manage = [py, "manage.py"]
    children: list[subprocess.Popen] = []

    def shutdown(*_args) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
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
    print("kintsugi demo: starting services (data under .kintsugi/)", flush=True)
    subprocess.run(manage + ["migrate", "--noinput", "-v", "0"], check=True)
    subprocess.run(manage + ["demo_setup"], check=True)
    subprocess.run(manage + ["collectstatic", "--noinput", "-v", "0"], check=True)
    children.append(subprocess.Popen(
        [py, "-m", "celery", "-A", "kintsugi_site", "worker", "-l", "warning", "-c", "2", "-n", "demo@%h",
         "-B"]))
    children.append(subprocess.Popen(web_server_command(py)))
    print("admin: http://127.0.0.1:8000/admin/   (Ctrl-C stops everything)", flush=True)
    while True:
        for child in children:
            if child.poll() is not None:
                print(f"{' '.join(child.args[:4])} exited with {child.returncode}; stopping", flush=True)
                shutdown()
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
