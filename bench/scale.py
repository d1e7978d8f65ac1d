"""Benchmark: one desk of ~N actions end to end through the product, each phase with its seconds, the
process's peak resident memory and FalkorDB's used_memory.

1. record: provenance.recording.services.desk_run(workspace=..., tickets=N / 2.62, seed=SEED), the product's recorder
   (the desk generator bench/repair.py uses, scaled up; live effects, cold model cache);
2. cold radius: a fresh Python process (the same servers and settings, the mirror's background read on)
   asks selectors.radius_actions once (cold_ms: a process's first question), then
   selectors.radius_actions_in_graph (one algo.BFS, the baseline, median of 3) beside it, waits for the
   background mirror read and asks once more (warm); it reports its own peak RSS;
3. flag: repairs.services.flag_source(via="cli") (the enqueue goes to the bench's private broker, which no
   worker reads), then repairs.job.run_repair(incident_id=...) called here with drafting on: walk
   (compute_plan), apply (the plan's steps), drafting (the job's draft step), verification (a full clean
   replay and the diff) timed by wrapping them, and flag → first item decidable seen by a thread polling
   the incident from its own Postgres connection (bench/repair.py Decidability).

There is no warming replay before the repair (bench repair has one): the repair meets the model cache as
the recording left it, as it would in production.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from bench import common

SEED = 11
WORKSPACE = "bench-scale"
ACTIONS_PER_TICKET = 2.62  # bench repair at 38,000 tickets recorded 99,710 actions
QUICK_ACTIONS = 400


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def falkordb_mb() -> dict:
    import redis

    info = redis.Redis.from_url(common.FALKORDB_URL).info("memory")
    return {"used_mb": info["used_memory"] / 2**20, "peak_mb": info["used_memory_peak"] / 2**20}


COLD_CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["KINTSUGI_BENCH_ROOT"])
import django
django.setup()
from django.conf import settings
settings.FALKORDB_URL = os.environ["FALKORDB_URL"]
settings.KINTSUGI_MIRROR_BACKGROUND = True
from bench import common
from provenance.recording import selectors
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
def peak_mb():  # VmHWM: getrusage's ru_maxrss would carry the parent's peak over fork and exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
graph = workspace_graph(sys.argv[1])
graph.ro_query("RETURN 1")  # the connection and the schema check: not the radius
t0 = time.perf_counter()
cold = selectors.radius_actions(graph, POISONED_PAGE)
cold_s = time.perf_counter() - t0
rss_after_cold = peak_mb()
bfs = []
for _ in range(3):
    t0 = time.perf_counter()
    oracle = selectors.radius_actions_in_graph(graph, POISONED_PAGE)
    bfs.append(time.perf_counter() - t0)
t0 = time.perf_counter()
for thread in [t for t in threading.enumerate() if t.name.startswith("mirror:")]:
    thread.join()
wait_s = time.perf_counter() - t0
warm = []
for _ in range(3):
    t0 = time.perf_counter()
    answer = selectors.radius_actions(graph, POISONED_PAGE)
    warm.append(time.perf_counter() - t0)
print(json.dumps({"cold_ms": cold_s * 1e3, "bfs_ms": common.median(bfs) * 1e3, "warm_ms": common.median(warm) * 1e3,
                  "mirror_wait_s": wait_s, "radius": len(cold), "correct": cold == oracle == answer,
                  "peak_rss_after_cold_mb": rss_after_cold,
                  "peak_rss_mb": peak_mb()}))
"""


def cold_radius(workspace: str) -> dict:
    """A process's first blast radius, in a process of its own (nothing of this one's heap or cache)."""
    env = {**os.environ, "KINTSUGI_BENCH_ROOT": str(common.ROOT)}
    out = subprocess.run([sys.executable, "-c", COLD_CHILD, workspace], cwd=common.ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(f"cold radius process failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Phases:
    """Seconds, peak RSS of this process (MB, as of the phase's end) and FalkorDB memory per phase."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def done(self, name: str, seconds: float, **extra) -> None:
        self.rows[name] = {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "falkordb": falkordb_mb(),
                           "load_avg": common.load_avg(), **extra}


def run(actions: int | None, quick: bool) -> dict:
    from django.conf import settings

    import repairs.engine as engine
    import repairs.job as job
    import repairs.services as services
    from bench.repair import DRAFTS, Decidability, _actor, _items, drafting
    from provenance import llm
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs.models import Incident

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    settings.KINTSUGI_REPAIR_PARTS, settings.KINTSUGI_REPAIR_HELPERS = 1, False  # one process does it all
    actions = actions or (QUICK_ACTIONS if quick else 1_000_000)
    tickets = max(1, round(actions / ACTIONS_PER_TICKET))
    res: dict = {"target_actions": actions, "tickets": tickets, "seed": SEED, "load_avg_start": common.load_avg()}
    ph = Phases()
    llm.reset_client()

    common.log(f"scale: recording {tickets:,} tickets (~{actions:,} actions) with desk_run")
    t0 = time.perf_counter()
    summary = desk_run(workspace=WORKSPACE, tickets=tickets, seed=SEED, reason="bench scale")
    ph.done("record (desk_run)", time.perf_counter() - t0, actions=summary["actions"],
            actions_per_s=summary["actions"] / (time.perf_counter() - t0))
    res["actions"] = summary["actions"]

    common.log("scale: a fresh process's first blast radius")
    t0 = time.perf_counter()
    cold = cold_radius(WORKSPACE)
    ph.done("cold radius (fresh process)", time.perf_counter() - t0, child_peak_rss_mb=cold["peak_rss_mb"])
    res["cold_radius"] = cold

    ws = Workspace.objects.get(name=WORKSPACE)
    timings = common.Stopwatch()
    orig = {"compute_plan": engine.compute_plan, "apply_step": job.apply_step, "verify_incident": job.verify_incident}

    def compute_plan(**kw):
        with timings("walk"):
            return orig["compute_plan"](**kw)

    def apply_step(graph_, step):
        with timings("apply"):
            return orig["apply_step"](graph_, step)

    def verify_incident(*a, **kw):
        with timings("verify"):
            return orig["verify_incident"](*a, **kw)

    def drafted(seconds):
        timings.phases[DRAFTS] = timings.phases.get(DRAFTS, 0.0) + seconds

    common.log("scale: flag_source + run_repair (drafting on)")
    engine.compute_plan, job.apply_step, job.verify_incident = compute_plan, apply_step, verify_incident
    try:
        watch = Decidability()
        t0 = watch.t0
        incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=_actor(),
                                        reason="bench scale", via=Incident.Via.CLI)
        ph.done("flag (flag_source)", time.perf_counter() - t0)
        watch.incident_id = incident.pk
        t1 = time.perf_counter()
        with drafting(True, drafted):
            incident = job.run_repair(incident_id=incident.pk)
        total_s = time.perf_counter() - t1
        repaired_s = time.perf_counter() - t0
    finally:
        engine.compute_plan, job.apply_step, job.verify_incident = (orig["compute_plan"], orig["apply_step"],
                                                                 orig["verify_incident"])
    incident.refresh_from_db()
    items = _items(incident)
    decided = watch.finish(items)
    t = timings.phases
    # Peak RSS is a high-water mark: the repair's phases share one reading, taken at its end.
    for name, key in (("repair: walk", "walk"), ("repair: apply", "apply"), ("repair: drafting", DRAFTS),
                      ("repair: verification", "verify")):
        ph.done(name, t.get(key, 0.0))
    other = total_s - sum(t.get(k, 0.0) for k in ("walk", "apply", DRAFTS, "verify"))
    ph.done("repair: other (checkpoint, bookkeeping)", other)
    ph.done("repair: run_repair total", total_s)
    res["phases"] = ph.rows
    res["repair"] = {"status": incident.status, "error": incident.error, "blast_radius": incident.blast_radius,
                     "counts": incident.counts, "items": items,
                     "verification": {k: (incident.verification or {}).get(k) for k in ("facts", "decisions", "effects")},
                     "flag_to_applied_s": decided.get("applied_s"), "flag_to_first_decidable_s": decided.get("first_s"),
                     "flag_to_all_decidable_s": decided.get("all_s"), "decidable_poll_s": decided.get("poll_s"),
                     "flag_to_repaired_s": repaired_s}
    res["peak_rss_mb"] = peak_rss_mb()
    res["falkordb"] = falkordb_mb()
    res["load_avg_end"] = common.load_avg()
    _tables(res)
    return res


def _tables(res: dict) -> None:
    rows = []
    for name, p in res["phases"].items():
        rows.append([name, p["seconds"], p.get("actions"), p.get("actions_per_s"), p["peak_rss_mb"],
                     p["falkordb"]["used_mb"], p["load_avg"]])
    r, c = res["repair"], res["cold_radius"]
    common.table(f"A {res['actions']:,}-action desk end to end ({res['tickets']:,} tickets), flagged "
                 f"partner-blog/policy-update",
                 ["phase", "seconds", "actions", "actions/s", "peak RSS MB", "FalkorDB MB", "load"], rows,
                 [f"blast radius {r['blast_radius']:,}; counts {r['counts']}; {r['items']:,} review items; "
                  f"verification diff {r['verification']}; incident {r['status']} {r['error'] or ''}",
                  "peak RSS = this process's high-water mark (getrusage) when the phase ended; FalkorDB MB = "
                  "used_memory after it (peak over the run: "
                  f"{res['falkordb']['peak_mb']:,.0f} MB)"])
    common.table("First question of a fresh process, and flag to decision",
                 ["measure", "value"],
                 [["cold radius ms (first radius_actions of a fresh process)", c["cold_ms"]],
                  ["one algo.BFS ms (radius_actions_in_graph, same process, median of 3)", c["bfs_ms"]],
                  ["cold / BFS", c["cold_ms"] / c["bfs_ms"] if c["bfs_ms"] else None],
                  ["warm ms (mirror read in the background, then asked again)", c["warm_ms"]],
                  ["warm / BFS", c["warm_ms"] / c["bfs_ms"] if c["bfs_ms"] else None],
                  ["background mirror read still running after the BFS runs, s", c["mirror_wait_s"]],
                  ["radius (live actions), all answers equal", f"{c['radius']:,}, {'yes' if c['correct'] else 'NO'}"],
                  ["fresh process peak RSS MB", c["peak_rss_mb"]],
                  ["flag -> plan applied s", r["flag_to_applied_s"]],
                  ["flag -> first item decidable s", r["flag_to_first_decidable_s"]],
                  ["flag -> all items decidable s", r["flag_to_all_decidable_s"]],
                  ["flag -> repaired s", r["flag_to_repaired_s"]]],
                 [f"decidable: polled from another connection every {r['decidable_poll_s']} s"])
