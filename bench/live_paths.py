"""Recording during a repair run as a deployment runs it: the flag enqueues the repair, a Celery worker
process (`celery -A kintsugi_site worker`) takes it, and meanwhile agents record through each path:

- `cli`: `manage.py record --workspace W --agent triage --payload …`, one process per recording (its
  latency is the command's: Python and Django starting included);
- `http`: the bench's remote writer and reader (bench.agents) through kintsugi_client against gunicorn
  with uvicorn workers (the recording entrance), call by call: a root and its handoff per recording;
- `in-process`: provenance.recording.services.record_root of a triage root in this process.

Each recording's latency is reported by the repair phase it started in (walk, apply, verify, draft: the
phases' marks, IncidentPhase; draft is the span in which the incident's review items were created, which
runs alongside the verification), beside the baseline: the same recorders for a while before the flag, in
the same run.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from bench import common

TICKETS = {"full": 3_000, "quick": 400}
BASELINE_SECONDS = {"full": 10.0, "quick": 4.0}
RATE = {"cli": 1.0, "http": 8.0, "in-process": 8.0}  # recordings started per second, per path
THREADS = {"cli": 4, "http": 2, "in-process": 2}  # recorders per path: a slow recording does not stop the others
WINDOWS = ("baseline", "walk", "apply", "verify", "draft")
TIMEOUT_S = 900


class _Recorder(threading.Thread):
    """Calls `record(i)` at `rate` per second until stopped; keeps (started at, seconds, ok)."""

    def __init__(self, path: str, record, rate: float):
        super().__init__(daemon=True, name=f"record-{path}")
        self.path, self.record, self.rate = path, record, rate
        self.samples: list[tuple[float, float, bool]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from django.db import connection

        i, start = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                begun, t0 = time.time(), time.perf_counter()
                try:
                    self.record(i)
                    self.samples.append((begun, time.perf_counter() - t0, True))
                except Exception as exc:  # noqa: BLE001 - a refused recording is what is measured
                    self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                    self.samples.append((begun, time.perf_counter() - t0, False))
                i += 1
                pause = start + i / self.rate - time.monotonic()
                if pause > 0:
                    self.stop.wait(pause)
        finally:
            connection.close()


def _paths(workspace: str, payloads: list[dict], base: str, key: str) -> dict:
    from kintsugi_client import Client
    from provenance.recording.services import record_root

    from bench.agents import _http_desk

    def cli(i: int) -> None:
        subprocess.run([sys.executable, "manage.py", "record", "--workspace", workspace, "--agent", "triage",
                        "--payload", json.dumps(payloads[i % len(payloads)])], cwd=common.ROOT, check=True,
                       capture_output=True, timeout=300)

    desk = _http_desk(Client(base, key, buffer=0))
    return {"cli": cli,
            "http": lambda i: desk.run_root("bench_remote_writer", {"n": 10_000_000 + i}),
            "in-process": lambda i: record_root(workspace=workspace, agent="triage",
                                                payload=payloads[i % len(payloads)])}


def _windows(incident) -> dict[str, tuple[float, float]]:
    """[start, end) in epoch seconds of each phase the repair went through, and of the drafting."""
    from repairs.models import IncidentPhase

    marks = {p: at.timestamp() for p, at in IncidentPhase.objects.filter(incident=incident)
             .values_list("phase", "entered_at")}
    order = [("walk", "walking"), ("apply", "applying"), ("verify", "verifying")]
    end = marks.get("done", incident.finished_at.timestamp() if incident.finished_at else time.time())
    out = {}
    for i, (label, phase) in enumerate(order):
        if phase in marks:
            nxt = next((marks[p] for _, p in order[i + 1:] if p in marks), end)
            out[label] = (marks[phase], nxt)
    created = list(incident.compensation_items.order_by("created_at").values_list("created_at", flat=True))
    if created:
        out["draft"] = (created[0].timestamp(), created[-1].timestamp() + 1e-3)
    return out


def _window_of(at: float, windows: dict, flagged: float) -> str | None:
    if at < flagged:
        return "baseline"
    if "draft" in windows and windows["draft"][0] <= at < windows["draft"][1]:
        return "draft"
    return next((label for label, (a, b) in windows.items() if label != "draft" and a <= at < b), None)


def run(quick: bool, tickets: int | None = None) -> dict:
    from django.contrib.auth import get_user_model

    from bench import agents, workers
    from bench.repair import _actor
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent
    from provenance.recording.services import desk_run
    from repairs.models import Incident
    from repairs.services import flag_source

    mode = "quick" if quick else "full"
    tickets = tickets or TICKETS[mode]
    name = "bench-live-paths"
    agents._agents()
    common.log(f"live paths: recording a desk of {tickets:,} tickets")
    summary = desk_run(workspace=name, tickets=tickets, seed=5, reason="bench")
    ws = Workspace.objects.get(name=name)
    lead = _actor()
    admin, _ = get_user_model().objects.get_or_create(username="bench-agents", defaults={"is_superuser": True})
    for agent in agents.REMOTE:
        if not ws.agent_registrations.filter(name=agent).exists():
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="bench", via="cli")
    key = issue_agent_token(workspace=ws, label="bench", actor=admin, reason="bench", via="cli")[1]
    payloads = [t.as_payload() for t in ws.tickets.order_by("ticket_id")[:200]]
    log_dir = common.RESULTS_DIR / "live-paths"
    log_dir.mkdir(parents=True, exist_ok=True)
    port = common._free_port()
    server, procs = agents._server(port), workers._workers(1, 1, True, log_dir)
    recorders: list[_Recorder] = []
    try:
        paths = _paths(name, payloads, f"http://127.0.0.1:{port}", key)
        paths["http"](-1)  # the web workers' imports and connections, outside the figures
        recorders = [_Recorder(path, record, RATE[path] / THREADS[path]) for path, record in paths.items()
                     for _ in range(THREADS[path])]
        for r in recorders:
            r.start()
        time.sleep(BASELINE_SECONDS[mode])
        common.log("live paths: flagging the poisoned page; the Celery worker repairs it while agents record")
        flagged = time.time()
        incident = flag_source(workspace=ws, source_id=POISONED_PAGE, actor=lead, reason="bench", via=Incident.Via.CLI)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            incident.refresh_from_db()
            if incident.status not in (Incident.Status.OPEN, Incident.Status.REPAIRING) and incident.phase in ("", "done"):
                break
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        for r in recorders:
            r.stop.set()
        for r in recorders:
            r.join(120)
        workers._stop(procs)
        server.terminate()
        server.wait(timeout=20)
    windows = _windows(incident)
    rows = []
    for path in paths:
        by_window: dict[str, list[float]] = {w: [] for w in WINDOWS}
        refused = {w: 0 for w in WINDOWS}
        for at, seconds, ok in (s for r in recorders if r.path == path for s in r.samples):
            w = _window_of(at, windows, flagged)
            if w is None:
                continue
            if ok:
                by_window[w].append(seconds)
            else:
                refused[w] += 1
        for w in WINDOWS:
            s = by_window[w]
            rows.append({"path": path, "window": w, "recordings": len(s), "refused": refused[w],
                         "p50_ms": common.median(s) * 1000 if s else None,
                         "p99_ms": common.pct(s, 99) * 1000 if s else None,
                         "max_ms": max(s) * 1000 if s else None,
                         "x_baseline": (common.median(s) / common.median(by_window["baseline"])
                                        if s and by_window["baseline"] else None)})
    out = {"tickets": tickets, "actions": summary["actions"], "status": incident.status,
           "phases_s": {w: b - a for w, (a, b) in windows.items()}, "rows": rows,
           "errors": {r.path: r.errors[:2] for r in recorders if r.errors},
           "verification": [(incident.verification or {}).get(k) for k in ("facts", "decisions", "effects")]}
    common.table("recording during a repair run by a Celery worker, per path and repair phase (latency per recording)",
                 ["path", "window", "recordings", "p50 ms", "p99 ms", "max ms", "x baseline p50", "refused"],
                 [[r["path"], r["window"], r["recordings"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["x_baseline"],
                   r["refused"]] for r in rows],
                 [f"desk {tickets:,} tickets, {summary['actions']:,} actions; repair {incident.status}, verification "
                  f"{'/'.join(str(v) for v in out['verification'])}; phases "
                  + ", ".join(f"{w} {s:.1f}s" for w, s in out["phases_s"].items()),
                  "baseline: the same recorders before the flag; draft: while the incident's review items were "
                  "created (alongside verify); cli: one `manage.py record` process per recording (start-up "
                  "included); http: a writer root and its reader, call by call; in-process: record_root",
                  *(f"{path} refusals: {errs}" for path, errs in out["errors"].items()),
                  f"load average {common.load_avg()}"])
    return out
