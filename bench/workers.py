"""Benchmark 3b: one repair with one Celery worker and with two, end to end through the broker.

For each configuration the same generated desk (desk_run, same seed) is recorded into a fresh workspace,
real `celery worker -c 1` processes are started against the bench's Postgres, FalkorDB and broker, and
the flag goes through repairs.services.flag_source (the repair is enqueued on commit and runs in a
worker). Timed from the flag to `repaired`, and the walk alone (until the plan is checkpointed), read
from the incident's phase as a support lead's progress bar reads it.

Configurations (same run; speed-ups against the mean of the two one-worker runs, first and last):
- 1 worker: the repairing worker does everything; the helper tasks it enqueues find the work done;
- 2 workers: the idle one records the verification baseline from the start (and diffs, if the repair
  is applied by then) and takes drafting parts once the plan is known (KINTSUGI_REPAIR_HELPERS, on by
  default);
- 2 workers, 4 parts: the same, and the radius walked in parts (KINTSUGI_REPAIR_PARTS=4);
- 2 workers, no helper tasks: the second worker has nothing to take (KINTSUGI_REPAIR_HELPERS=0): a
  check that the gain comes from the helper tasks, not from having a second process;
- 1 worker, again: the first configuration repeated, to show the run's noise.
The timeline row says when each phase began (read from the incident as the admin's progress bar reads
it), when the baseline was recorded and when the first items were committed. The model cache is
warmed first by a full replay without the flagged page, as in `bench repair`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import common

SEED = 7
# (label, parts, workers, helpers): the first row is the baseline every speed-up is measured against.
# One worker runs first and again last: the machine drifts within a run (the first repair follows the
# warm-up's bulk writes), so speed-ups are against the mean of the two, and their gap is the noise.
CONFIGS = [("1 worker", 1, 1, True), ("2 workers", 1, 2, True), ("2 workers, 4 parts", 4, 2, True),
           ("2 workers, no helper tasks", 1, 2, False), ("1 worker, again", 1, 1, True)]


def _workers(n: int, parts: int, helpers: bool, log_dir) -> list[subprocess.Popen]:
    from kintsugi_site.celery import app

    app.control.purge()
    env = dict(os.environ, KINTSUGI_REPAIR_PARTS=str(parts), KINTSUGI_REPAIR_PARALLEL_MIN="1",
               KINTSUGI_REPAIR_HELPERS="1" if helpers else "0",
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


def _one(tickets: int, label: str, parts: int, workers: int, helpers: bool, log_dir) -> dict:
    from django.contrib.auth import get_user_model

    from compensation.models import CompensationItem

    from provenance.desk.scenario import POISONED_PAGE
    from provenance.recording.services import desk_run, get_workspace
    from repairs.models import Incident
    from repairs.services import flag_source

    name = f"bench-workers-{parts}-{workers}-{int(helpers)}"
    summary = desk_run(workspace=name, tickets=tickets, seed=SEED, reason="bench")
    user, _ = get_user_model().objects.get_or_create(username="bench")
    procs = _workers(workers, parts, helpers, log_dir)
    try:
        ticks = common.cpu_ticks()
        t0 = time.perf_counter()
        incident = flag_source(workspace=get_workspace(name), source_id=POISONED_PAGE, actor=user, reason="bench",
                               via=Incident.Via.CLI)
        walked = None
        timeline: dict[str, float] = {}
        while True:
            incident.refresh_from_db()
            now = time.perf_counter() - t0
            if walked is None and incident.plan is not None:
                walked = now
            timeline.setdefault(incident.phase or "queued", now)
            if incident.phase == "verifying":  # chores done (verification, drafts) out of all
                timeline.setdefault(f"verifying {incident.progress_done}/{incident.progress_total}", now)
            if incident.baseline_for:
                timeline.setdefault("baseline recorded", now)
            if "items drafted" not in timeline and CompensationItem.objects.filter(incident=incident).exists():
                timeline["items drafted"] = now
            if incident.status in ("repaired", "failed", "blocked"):
                break
            time.sleep(0.05)
        total = time.perf_counter() - t0
        busy = common.cores_busy(ticks, common.cpu_ticks())
    finally:
        _stop(procs)
    v = incident.verification or {}
    parts_info = (incident.plan or {}).get("parts", [])
    return {"label": label, "parts": parts, "workers": workers, "actions": summary["actions"],
            "status": incident.status, "error": incident.error, "blast_radius": incident.blast_radius,
            "counts": incident.counts, "walk_s": walked, "total_s": total,
            "verification": [v.get(k) for k in ("facts", "decisions", "effects")],
            "timeline": {k: round(v, 2) for k, v in timeline.items()},
            "cores_busy": busy,
            "items": CompensationItem.objects.filter(incident=incident).count(),
            "walkers": len({p["walked_by"] for p in parts_info}) if parts_info else 1,
            "part_seconds": [round(p["seconds"], 2) for p in parts_info]}


def run(tickets: int, quick: bool) -> dict:
    import tempfile
    from pathlib import Path

    from django.conf import settings

    from bench.repair import full_replay
    from provenance import llm
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.recording.services import desk_run, get_workspace

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    log_dir = Path(tempfile.mkdtemp(prefix="kintsugi-bench-workers-"))
    common.log(f"workers: warming the model cache on a {tickets:,}-ticket desk")
    desk_run(workspace="bench-workers-warm", tickets=tickets, seed=SEED, reason="bench")
    llm.reset_client()
    full_replay(get_workspace("bench-workers-warm"), excluded={POISONED_PAGE})
    rows = []
    for label, parts, workers, helpers in CONFIGS:
        common.log(f"workers: {label}")
        rows.append(_one(tickets, label, parts, workers, helpers, log_dir))
    ones = [r for r in rows if r["workers"] == 1]
    base = {k: sum(r[k] for r in ones) / len(ones) for k in ("walk_s", "total_s")}
    base.update(counts=rows[0]["counts"], items=rows[0]["items"])
    table = [[r["label"], f"{r['actions']:,}", r["blast_radius"], r["walkers"], r["walk_s"], r["total_s"],
              base["walk_s"] / r["walk_s"] if r["walk_s"] else None, base["total_s"] / r["total_s"], r["cores_busy"],
              r["status"], "/".join(str(x) for x in r["verification"]), r["items"],
              r["counts"] == base["counts"] and r["items"] == base["items"]]
             for r in rows]
    common.table(f"Repair with one and two Celery workers ({tickets:,} tickets, flag to repaired)",
                 ["configuration", "actions", "radius", "walked by", "walk s", "total s", "walk speed-up",
                  "total speed-up", "cores busy", "status", "verification", "review items", "same outcome"], table,
                 [f"parts' walk seconds: " + "; ".join(f"{r['label']}: {r['part_seconds']}" for r in rows if r["part_seconds"]),
                  "timelines (s from the flag): " + "; ".join(f"{r['label']}: {r['timeline']}" for r in rows),
                  "walk = flag until the plan is checkpointed; total = flag until repaired; same outcome = same "
                  "counts and as many review items as the first row; speed-ups against the mean of the one-worker rows; cores busy = average over the repair of the "
                  f"machine's {os.cpu_count()} cores (workers, FalkorDB, Postgres); same run; load average {common.load_avg()}"])
    return {"tickets": tickets, "runs": rows}
