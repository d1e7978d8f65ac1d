"""Benchmark 3b: one repair with one Celery worker and with two, end to end through the broker.

For each configuration the same generated desk (desk_run, same seed) is recorded into a fresh workspace,
real `celery worker -c 1` processes are started against the bench's Postgres, FalkorDB and broker, and
the flag goes through repairs.services.flag_source (the repair is enqueued on commit and runs in a
worker). Timed from the flag to `repaired`, and the walk alone (until the plan is checkpointed), read
from the incident's phase as a support lead's progress bar reads it.

Configurations: the radius walked in one piece by one worker (KINTSUGI_REPAIR_PARTS=1), in parts by
one worker (the repairing worker walks every part itself), and in parts by two workers. The model
cache is warmed first by a full replay without the flagged page, as in `bench repair`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import common

SEED = 7
CONFIGS = [("one piece, 1 worker", 1, 1), ("4 parts, 1 worker", 4, 1), ("4 parts, 2 workers", 4, 2)]


def _workers(n: int, parts: int, log_dir) -> list[subprocess.Popen]:
    from kintsugi_site.celery import app

    app.control.purge()
    env = dict(os.environ, KINTSUGI_REPAIR_PARTS=str(parts), KINTSUGI_REPAIR_PARALLEL_MIN="1",
               DJANGO_SETTINGS_MODULE="kintsugi_site.settings.test")
    procs = [subprocess.Popen([sys.executable, "-m", "celery", "-A", "kintsugi_site", "worker", "-l", "warning",
                               "-c", "1", "--without-gossip", "--without-mingle", "--without-heartbeat",
                               "-n", f"bench{i}-{time.time_ns()}@%h"],
                              cwd=common.ROOT, env=env, stdout=open(log_dir / f"worker{i}.log", "ab"),
                              stderr=subprocess.STDOUT, start_new_session=True) for i in range(n)]
    deadline = time.monotonic() + 60
    while len(app.control.ping(timeout=0.5) or []) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} workers did not answer a ping within 60 s (logs in {log_dir})")
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def _one(tickets: int, label: str, parts: int, workers: int, log_dir) -> dict:
    from django.contrib.auth import get_user_model

    from provenance.desk.scenario import POISONED_PAGE
    from provenance.services import desk_run, get_workspace
    from repairs.models import Incident
    from repairs.services import flag_source

    name = f"bench-workers-{parts}-{workers}"
    summary = desk_run(workspace=name, tickets=tickets, seed=SEED, reason="bench")
    user, _ = get_user_model().objects.get_or_create(username="bench")
    procs = _workers(workers, parts, log_dir)
    try:
        t0 = time.perf_counter()
        incident = flag_source(workspace=get_workspace(name), source_id=POISONED_PAGE, actor=user, reason="bench",
                               via=Incident.Via.CLI)
        walked = None
        while True:
            incident.refresh_from_db()
            if walked is None and incident.plan is not None:
                walked = time.perf_counter() - t0
            if incident.status in ("repaired", "failed", "blocked"):
                break
            time.sleep(0.05)
        total = time.perf_counter() - t0
    finally:
        _stop(procs)
    v = incident.verification or {}
    parts_info = (incident.plan or {}).get("parts", [])
    return {"label": label, "parts": parts, "workers": workers, "actions": summary["actions"],
            "status": incident.status, "error": incident.error, "blast_radius": incident.blast_radius,
            "counts": incident.counts, "walk_s": walked, "total_s": total,
            "verification": [v.get(k) for k in ("facts", "decisions", "effects")],
            "walkers": len({p["walked_by"] for p in parts_info}) if parts_info else 1,
            "part_seconds": [round(p["seconds"], 2) for p in parts_info]}


def run(tickets: int, quick: bool) -> dict:
    import tempfile
    from pathlib import Path

    from django.conf import settings

    from bench.repair import full_replay
    from provenance import llm
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.services import desk_run, get_workspace

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    log_dir = Path(tempfile.mkdtemp(prefix="kintsugi-bench-workers-"))
    common.log(f"workers: warming the model cache on a {tickets:,}-ticket desk")
    desk_run(workspace="bench-workers-warm", tickets=tickets, seed=SEED, reason="bench")
    llm.reset_client()
    full_replay(get_workspace("bench-workers-warm"), excluded={POISONED_PAGE}, graph_suffix="replay")
    rows = []
    for label, parts, workers in CONFIGS:
        common.log(f"workers: {label}")
        rows.append(_one(tickets, label, parts, workers, log_dir))
    base = rows[0]
    table = [[r["label"], f"{r['actions']:,}", r["blast_radius"], r["walkers"], r["walk_s"], r["total_s"],
              base["walk_s"] / r["walk_s"] if r["walk_s"] else None, base["total_s"] / r["total_s"],
              r["status"], "/".join(str(x) for x in r["verification"]), r["counts"] == base["counts"]]
             for r in rows]
    common.table(f"Repair with one and two Celery workers ({tickets:,} tickets, flag to repaired)",
                 ["configuration", "actions", "radius", "walked by", "walk s", "total s", "walk speed-up",
                  "total speed-up", "status", "verification", "same counts"], table,
                 [f"parts' walk seconds: " + "; ".join(f"{r['label']}: {r['part_seconds']}" for r in rows if r["part_seconds"]),
                  "walk = flag until the plan is checkpointed; total = flag until repaired (apply and the "
                  "verification replay run in the repairing worker alone); speed-ups against the first row, "
                  f"same run; load average {common.load_avg()}"])
    return {"tickets": tickets, "runs": rows}
