"""Benchmark: a live desk. Recording goes on while a flagged source is repaired, and roots of one
workspace record side by side (provenance.recording.live), in the same run on the same machine.

- `concurrent roots`: the writer/reader roots of `bench agents` (8 recorder ops each) through
  provenance.recording.services.record_root, one after another (the baseline) and from several threads at once;
- `recording during a repair`: a desk of `tickets` tickets (~2.6 actions each: 38,000 is ~100k actions);
  a recorder thread records triage roots (customers writing again) at a set rate for a while (the
  baseline), then the poisoned page is flagged and repaired in this process while it keeps recording.
  Reported: each recording's commit latency (open on a snapshot, run, then commit: the time commit()
  takes, waiting for the graph included) before and during the repair, how many recordings were
  refused (none should be), the actions the repair caught up with, and its verification; then the
  containment (bench.containment): flag → containment time (p50/p99 over a few flags closed at once as
  false alarms and the repair's own), the effects held and how the repair settled them, and "paid live"
  (effects performed live by recordings that read the poisoned versions between the flag and the apply)
  beside the same run with containment off (the flag's marks taken off at once): the baseline;
- `record_root on a hot key`: the same roots on a workspace whose `shared` key (the writer sets it, the
  reader gets it, every root) already has N versions, beside N = 0;
- `recording during a repair run by a Celery worker` (bench.live_paths): the repair as a deployment runs
  it, while agents record through the CLI, HTTP and in-process, latency per repair phase beside a baseline.
"""
from __future__ import annotations

import threading
import time

from bench import common, live_paths
from bench.agents import OPS_PER_ROOT, _agents

TICKETS = {"full": 38_000, "quick": 150}
ROOTS = {"full": 2_000, "quick": 200}
THREADS = 4
RATE = {"full": 20.0, "quick": 10.0}  # recordings per second during the repair
BASELINE_SECONDS = {"full": 10.0, "quick": 3.0}
HOT_VERSIONS = {"full": [0, 2_000, 20_000], "quick": [0, 2_000]}
HOT_ROOTS = {"full": 50, "quick": 20}
FLAG_SAMPLES = {"full": 20, "quick": 5}  # flags closed at once as false alarms, for flag → containment time


def _concurrent_roots(roots: int) -> dict:
    from django.db import connection

    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace
    from provenance.recording.services import record_root

    _agents()
    out: dict = {"roots": roots, "ops": roots * OPS_PER_ROOT, "threads": THREADS}
    for label, threads in (("sequential", 1), ("concurrent", THREADS)):
        name = f"bench-live-{label}"
        Workspace.objects.filter(name=name).delete()
        workspace_graph(name).delete()
        Workspace.objects.create(name=name)
        errors: list[BaseException] = []

        def work(part: int, threads=threads, name=name, errors=errors):
            try:
                for n in range(part, roots, threads):
                    record_root(workspace=name, agent="bench_local_writer", payload={"n": n})
            except BaseException as exc:  # noqa: BLE001 - reported
                errors.append(exc)
            finally:
                if threads > 1:
                    connection.close()

        t0 = time.perf_counter()
        if threads == 1:
            work(0)
        else:
            pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        seconds = time.perf_counter() - t0
        actions = workspace_graph(name).ro_query("MATCH (a:Action) RETURN count(a)")[0][0]
        out[label] = {"seconds": seconds, "ops_per_s": out["ops"] / seconds, "errors": len(errors),
                      "actions": actions, "complete": actions == 2 * roots}
    out["speedup"] = out["concurrent"]["ops_per_s"] / out["sequential"]["ops_per_s"]
    return out


def _hot_key(versions: list[int], roots: int) -> list[dict]:
    """record_root per root on a workspace whose `shared` key already has N versions (recorded in one
    session first, as a desk run would), N = 0 the baseline."""
    from core.db_roles import OWNER_ALIAS, split_roles
    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace
    from provenance.recording.recorder import GraphRecorder
    from provenance.recording.services import record_root

    _agents()
    out = []
    for prior in versions:
        name = f"bench-live-hot-{prior}"
        Workspace.objects.using(OWNER_ALIAS if split_roles() else "default").filter(name=name).delete()
        graph = workspace_graph(name)
        graph.delete()
        Workspace.objects.create(name=name)
        session = GraphRecorder(graph=graph, workspace=name, sources={}, effects="sandbox", load=False)
        for n in range(prior):
            session.run_root("bench_local_writer", {"n": n})
        session.flush()
        times = []
        for n in range(prior, prior + roots):
            t0 = time.perf_counter()
            record_root(workspace=name, agent="bench_local_writer", payload={"n": n})
            times.append(time.perf_counter() - t0)
        stored = graph.ro_query("MATCH (f:Fact {key: $key}) RETURN count(f)", {"key": "shared"})[0][0]
        assert stored == prior + roots, stored
        out.append({"versions": prior, "roots": roots, "p50_ms": common.median(times) * 1000,
                    "mean_ms": sum(times) / len(times) * 1000, "p95_ms": common.pct(times, 95) * 1000})
    return out


class _Recorder(threading.Thread):
    """Records triage roots at `rate` per second until stopped; keeps (started, commit seconds, ok)."""

    def __init__(self, workspace: str, payloads: list[dict], rate: float):
        super().__init__(daemon=True)
        self.workspace, self.payloads, self.rate = workspace, payloads, rate
        self.samples: list[tuple[float, float, bool]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        # Set once the flag is near: the poisoned versions, and (committed at, effects, refund cents) of
        # each recording that performed effects live after reading one of them.
        self.poisoned: list[int] | None = None
        self.paid: list[tuple[float, int, int]] = []

    def run(self) -> None:
        from django.db import connection

        from bench.containment import paid
        from provenance.graph.graph import workspace_graph
        from provenance.recording.live import SnapshotRecording
        from provenance.models import Workspace

        ws = Workspace.objects.get(name=self.workspace)
        graph = workspace_graph(self.workspace)
        i, start = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                payload = self.payloads[i % len(self.payloads)]
                i += 1
                begun = time.monotonic()
                try:
                    recording = SnapshotRecording(ws)
                    recording.run("triage", payload)
                    t0 = time.monotonic()
                    ids = recording.commit()
                    self.samples.append((begun, time.monotonic() - t0, True))
                    if self.poisoned is not None:
                        self.paid.append((time.monotonic(), *paid(graph, ids, self.poisoned)))
                except Exception as exc:  # noqa: BLE001 - a refused recording is what is measured
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    self.samples.append((begun, 0.0, False))
                pause = start + i / self.rate - time.monotonic()
                if pause > 0:
                    self.stop.wait(pause)
        finally:
            connection.close()


def _live_repair(tickets: int, quick: bool, *, contain: bool = True) -> dict:
    from django.conf import settings

    from bench import containment
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs.job import run_repair
    from repairs.models import Incident
    from repairs.services import flag_source

    settings.KINTSUGI_REPAIR_PARTS, settings.KINTSUGI_REPAIR_HELPERS = 1, False
    mode = "quick" if quick else "full"
    name = "bench-live-desk" if contain else "bench-live-desk-uncontained"  # a repaired flag's quarantine stays
    common.log(f"live: recording a desk of {tickets:,} tickets")
    t0 = time.perf_counter()
    summary = desk_run(workspace=name, tickets=tickets, seed=3, reason="bench")
    out: dict = {"tickets": tickets, "actions": summary["actions"], "record_s": time.perf_counter() - t0}
    ws = Workspace.objects.get(name=name)
    tickets_qs = ws.tickets.order_by("ticket_id")
    vip = [t.as_payload() for t in tickets_qs if "vip" in t.body.lower()][:200]
    payloads = vip + [t.as_payload() for t in tickets_qs[:200]]
    recorder = _Recorder(name, payloads, RATE[mode])
    recorder.start()
    time.sleep(BASELINE_SECONDS[mode])
    from bench.repair import _actor

    lead = _actor()
    samples = (containment.flag_samples(workspace=ws, source_id=POISONED_PAGE, actor=lead, count=FLAG_SAMPLES[mode])
               if contain else [])
    recorder.poisoned = containment.poisoned_versions(workspace_graph(name), POISONED_PAGE)
    common.log(f"live: flagging the poisoned page and repairing while the desk records (containment "
               f"{'on' if contain else 'off'})")
    began = time.monotonic()
    # Enqueued into the bench's own broker, which no worker reads: the repair runs here.
    incident = flag_source(workspace=ws, source_id=POISONED_PAGE, actor=lead, reason="bench", via=Incident.Via.CLI)
    if not contain:
        containment.uncontain(name, incident.pk)
    run_repair(incident_id=incident.pk)
    ended = time.monotonic()
    time.sleep(1.0)
    recorder.stop.set()
    recorder.join(60)
    incident.refresh_from_db()
    before = [s for b, s, ok in recorder.samples if ok and b < began]
    during = [s for b, s, ok in recorder.samples if ok and began <= b <= ended]
    verification = incident.verification or {}
    out.update({
        "repair_s": ended - began, "status": incident.status, "error": incident.error,
        "recordings_before": len(before), "recordings_during": len(during),
        "refused": sum(1 for _, _, ok in recorder.samples if not ok), "refusals": recorder.errors[:5],
        "commit_p50_before_ms": common.median(before) * 1000, "commit_p99_before_ms": common.pct(before, 99) * 1000,
        "commit_p50_during_ms": common.median(during) * 1000, "commit_p99_during_ms": common.pct(during, 99) * 1000,
        "commit_max_during_ms": max(during, default=float("nan")) * 1000,
        "caught_up": (incident.plan or {}).get("caught_up"), "blast_radius": incident.blast_radius,
        "verification": [verification.get(k) for k in ("facts", "decisions", "effects")],
    })
    window = [(n, cents) for at, n, cents in recorder.paid if began <= at <= ended]
    held = containment.figures([incident.pk])
    seconds = samples + held["seconds"]
    out["containment"] = {
        "on": contain, "flag_samples": len(seconds) if contain else 0, "p50_s": common.median(seconds) if contain else None,
        "p99_s": common.pct(seconds, 99) if contain else None,
        "repair_flag_s": held["seconds"][0] if contain and held["seconds"] else None,
        "held": held["held"], "performed": held["performed"], "dropped": held["dropped"],
        "still_held": held["still_held"], "paid_live": sum(n for n, _ in window),
        "paid_live_refund_cents": sum(c for _, c in window), "poisoned_versions": len(recorder.poisoned),
    }
    return out


def run(quick: bool, tickets: int | None = None) -> dict:
    mode = "quick" if quick else "full"
    out = {"concurrent_roots": _concurrent_roots(ROOTS[mode])}
    c = out["concurrent_roots"]
    common.table("concurrent in-process roots (record_root, one workspace)",
                 ["path", "roots", "ops", "seconds", "ops/s", "x sequential", "errors"],
                 [["sequential (baseline)", c["roots"], c["ops"], c["sequential"]["seconds"],
                   c["sequential"]["ops_per_s"], 1.0, c["sequential"]["errors"]],
                  [f"{c['threads']} threads", c["roots"], c["ops"], c["concurrent"]["seconds"],
                   c["concurrent"]["ops_per_s"], c["speedup"], c["concurrent"]["errors"]]],
                 [f"{OPS_PER_ROOT} recorder ops per root; load average {common.load_avg()}"])
    out["hot_key"] = hot = _hot_key(HOT_VERSIONS[mode], HOT_ROOTS[mode])
    common.table("record_root on a key with N prior versions (one workspace each)",
                 ["prior versions", "roots", "p50 ms", "mean ms", "p95 ms", "x N=0"],
                 [[h["versions"], h["roots"], h["p50_ms"], h["mean_ms"], h["p95_ms"], h["p50_ms"] / hot[0]["p50_ms"]]
                  for h in hot],
                 ["the writer sets `shared`, the reader gets it: every root reads and writes the hot key; the "
                  "prior versions are 2 actions each, so N also grows the workspace",
                  f"load average {common.load_avg()}"])
    out["repair"] = r = _live_repair(tickets or TICKETS[mode], quick)
    common.table("recording during a repair (commit latency of each recording)",
                 ["window", "recordings", "p50 ms", "p99 ms", "refused"],
                 [["before the flag (baseline)", r["recordings_before"], r["commit_p50_before_ms"],
                   r["commit_p99_before_ms"], 0],
                  ["during the repair", r["recordings_during"], r["commit_p50_during_ms"], r["commit_p99_during_ms"],
                   r["refused"]]],
                 [f"desk {r['tickets']:,} tickets, {r['actions']:,} actions; repair {r['repair_s']:.1f}s, {r['status']}; "
                  f"blast radius {r['blast_radius']}, caught up {r['caught_up']}; verification "
                  f"{'/'.join(str(v) for v in r['verification'])}; max commit during {r['commit_max_during_ms']:.0f} ms",
                  f"load average {common.load_avg()}"])
    from core.money import format_money

    off = _live_repair(tickets or TICKETS[mode], quick, contain=False)
    out["containment"] = {"on": r["containment"], "off": off["containment"]}
    rows = []
    for label, run_ in (("containment on", r), ("containment off (baseline)", off)):
        c = run_["containment"]
        rows.append([label, c["flag_samples"] or "-", c["p50_s"] if c["on"] else "-", c["p99_s"] if c["on"] else "-", c["held"], c["performed"], c["dropped"],
                     c["still_held"], c["paid_live"], format_money(c["paid_live_refund_cents"], "USD")])
    common.table("containment during a repair (flag → containment; effects held and settled; paid live)",
                 ["run", "flags", "flag → contained p50 s", "p99 s", "held", "performed", "dropped", "still held",
                  "paid live", "paid live refunds"], rows,
                 [f"paid live: effects performed live by recordings that read one of the "
                  f"{r['containment']['poisoned_versions']} poisoned versions between the flag and the apply; "
                  f"containment off = the flag's marks taken off at once, same desk and rate; baseline repair "
                  f"{off['repair_s']:.1f}s {off['status']}, verification "
                  f"{'/'.join(str(v) for v in off['verification'])}",
                  f"flags: {FLAG_SAMPLES[mode]} closed at once as false alarms plus the repair's own",
                  f"load average {common.load_avg()}"])
    out["paths"] = live_paths.run(quick)
    return out
