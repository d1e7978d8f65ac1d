"""Benchmark 3: a repair of a generated desk, beside a full replay of the same desk.

1. record: provenance.recording.services.desk_run(workspace=..., tickets=N, seed=SEED) (live effects, cold model
   cache: every model answer is computed by the offline backend and written to the FalkorDB cache);
2. warm: a full replay without the flagged page into a scratch graph (what repairs.verify.record_baseline
   does); it also puts the clean model answers into the FalkorDB cache, so the repair below runs with
   cached model calls;
3. repair: repairs.services.flag_source(via="cli") then repairs.job.run_repair(incident_id=...) called
   here (CELERY_TASK_ALWAYS_EAGER is False; the enqueue goes to the bench's private broker and is never
   consumed). Phases are timed by wrapping compute_plan (walk), apply_step (apply), record_baseline and
   diff_workspace (verify: record_baseline = a full replay with cached model calls, then export/diff). The model client
   is reset before the walk and before verify, so both start with an empty in-process memo and a warm
   FalkorDB cache, the way a fresh Celery worker would;
   with drafting on, a thread polling Postgres from its own connection notes when the incident first
   is decidable (compensation.delivery.gates) with items, and with all of them;
4. the minimum number of re-executions, computed independently from the graph: live actions with a
   FEEDS/HANDED_OFF predecessor (edges before or after the repair) that is poisoned, rerun_changed,
   superseded or new.
"""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from functools import wraps

from bench import common
from provenance.vocabulary import CHANGED, DEAD

SEED = 7
WORKSPACE = "bench-repair"
# Above this, compensation drafting is switched off for the timed repair (the walk and verification
# figures stay comparable with earlier runs) and measured on small desks instead (drafting_probe);
# `--drafting` keeps it on at any size (~0.6 items per ticket, ~1 ms each) to time flag -> decidable.
DRAFTING_MAX_TICKETS = 400


class QueryLog:
    """Counts and times every Graph query by its name in provenance.graph.queries (or its first line)."""

    def __init__(self) -> None:
        from provenance.graph import queries

        self.names = {v.strip(): k for k, v in vars(queries).items() if isinstance(v, str) and k.isupper()}
        self.count: Counter = Counter()
        self.secs: dict[str, float] = defaultdict(float)
        self.active = False

    def name(self, cypher: str) -> str:
        return self.names.get(cypher.strip()) or " ".join(cypher.split())[:60]

    def install(self):
        from provenance.graph.graph import Graph

        saved = {"query": Graph.query, "ro_query": Graph.ro_query}
        log = self

        def wrap(fn):
            @wraps(fn)
            def inner(self, cypher, params=None, **kw):
                if not log.active:
                    return fn(self, cypher, params, **kw)
                t0 = time.perf_counter()
                try:
                    return fn(self, cypher, params, **kw)
                finally:
                    n = log.name(cypher)
                    log.count[n] += 1
                    log.secs[n] += time.perf_counter() - t0
            return inner

        Graph.query = wrap(Graph.query)
        Graph.ro_query = wrap(Graph.ro_query)
        return saved

    @staticmethod
    def uninstall(saved) -> None:
        from provenance.graph.graph import Graph

        Graph.query, Graph.ro_query = saved["query"], saved["ro_query"]

    def top(self, n: int = 8) -> list[tuple[str, int, float]]:
        return sorted(((k, self.count[k], self.secs[k]) for k in self.count), key=lambda r: -r[2])[:n]


def _actor():
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench-lead", defaults={"is_staff": True})
    return user


def full_replay(ws, *, excluded: set[str]) -> tuple[int, float]:
    """Re-run every root action of the workspace (minus the flagged page's ingesters): the product's own
    verification baseline (repairs.verify.record_baseline), timed."""
    from repairs.verify import record_baseline

    t0 = time.perf_counter()
    actions = record_baseline(workspace=ws, excluded=excluded)
    return actions, time.perf_counter() - t0


def edges_and_statuses(graph) -> tuple[set[tuple[int, int]], dict[int, str]]:
    edges = set()
    for text in graph.ro_query("MATCH (a:Action)-[:FEEDS|HANDED_OFF]->(b:Action) "
                               "RETURN string.join(collect(toString(a.id) + '>' + toString(b.id)), ',')")[0]:
        if text:
            edges.update(tuple(map(int, e.split(">"))) for e in text.split(","))
    status = {}
    text = graph.ro_query("MATCH (a:Action) RETURN string.join(collect(toString(a.id) + '=' + a.status), ',')")[0][0]
    for pair in (text or "").split(","):
        if pair:
            i, _, s = pair.partition("=")
            status[int(i)] = s
    return edges, status


def minimum_reexecutions(edges: set[tuple[int, int]], status: dict[int, str]) -> set[int]:
    changed = {a for a, s in status.items() if s in CHANGED}
    return {b for a, b in edges if a in changed and status.get(b) not in (*DEAD, "new")}


DRAFTS = "drafts (the job's draft step)"


@contextmanager
def drafting(enabled: bool, record):
    """The repair job's drafting step on or off for one repair, timed: record(seconds) after each call."""
    from compensation import receivers
    from repairs.signals import repair_planned

    uid, orig = "compensation.draft_planned_repair", receivers.draft_planned_repair

    def draft_planned_repair(sender, **kw):
        if not enabled:
            return True
        t0 = time.perf_counter()
        try:
            return orig(sender, **kw)
        finally:
            record(time.perf_counter() - t0)

    repair_planned.disconnect(dispatch_uid=uid)
    repair_planned.connect(draft_planned_repair, dispatch_uid=uid, weak=False)
    try:
        yield
    finally:
        repair_planned.disconnect(dispatch_uid=uid)
        repair_planned.connect(orig, dispatch_uid=uid)


class Decidability:
    """When a reviewer could first decide the incident's items, seen from outside the job: a thread
    with its own Postgres connection polls the incident (compensation.delivery.gates.decidable) and its item
    count every `every` seconds from the flag on, so the figures are within `every` of the moment."""

    def __init__(self, every: float = 0.1):
        import threading

        self.every, self.samples, self.incident_id = every, [], None
        self.t0 = time.perf_counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        from django.db import connection

        from compensation.delivery.gates import decidable
        from compensation.models import CompensationItem
        from repairs.models import Incident

        try:
            while not self.stop.wait(self.every):
                if self.incident_id is None:
                    continue
                incident = Incident.objects.only("status", "phase").get(pk=self.incident_id)
                n = CompensationItem.objects.filter(incident_id=self.incident_id).count()
                self.samples.append((time.perf_counter() - self.t0, decidable(incident), n))
        finally:
            connection.close()

    def finish(self, items: int) -> dict:
        """Seconds from the flag to the first item and to all `items` being decidable (None: never seen)."""
        self.stop.set()
        self.thread.join()
        applied = next((t for t, ok, n in self.samples if ok), None)
        first = next((t for t, ok, n in self.samples if ok and n), None)
        every = next((t for t, ok, n in self.samples if ok and n >= items), None) if items else None
        return {"applied_s": applied, "first_s": first, "all_s": every, "poll_s": self.every, "samples": len(self.samples)}


def run(tickets: int, quick: bool, *, with_drafting: bool | None = None) -> dict:
    from django.conf import settings

    import repairs.engine as engine
    import repairs.job as job
    import repairs.services as services
    import repairs.verify as verify
    from provenance import llm
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.graph.graph import workspace_graph
    from provenance.recording.recorder import GraphRecorder
    from provenance.recording.services import desk_run
    from repairs.models import Incident

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    # One worker walking the radius in one piece: `bench workers` compares parts and workers.
    settings.KINTSUGI_REPAIR_PARTS, settings.KINTSUGI_REPAIR_HELPERS = 1, False
    if with_drafting is None:
        with_drafting = tickets <= DRAFTING_MAX_TICKETS
    res: dict = {"tickets": tickets, "seed": SEED, "load_avg": {}, "drafting": with_drafting}
    sw = common.Stopwatch()
    llm.reset_client()

    common.log(f"repair: recording a desk of {tickets:,} tickets (desk_run, cold model cache)")
    with sw("record"):
        summary = desk_run(workspace=WORKSPACE, tickets=tickets, seed=SEED, reason="bench")
    res["load_avg"]["record"] = common.load_avg()
    client = llm.get_client()
    res["record"] = {"actions": summary["actions"], "seconds": sw.phases["record"],
                     "actions_per_s": summary["actions"] / sw.phases["record"], "model_calls": client.calls,
                     "cache_hits": client.hits, "effects": summary["effects"]}
    from provenance.models import Workspace

    ws = Workspace.objects.get(name=WORKSPACE)
    graph = workspace_graph(ws.name)

    common.log(f"repair: full replay #1 of {summary['actions']:,} actions (warms the clean model answers)")
    llm.reset_client()
    n1, s1 = full_replay(ws, excluded={POISONED_PAGE})
    c1 = llm.get_client()
    res["replay_warming"] = {"actions": n1, "seconds": s1, "actions_per_s": n1 / s1, "model_calls": c1.calls,
                             "cache_hits": c1.hits}
    res["load_avg"]["replay"] = common.load_avg()

    edges_before, _ = edges_and_statuses(graph)

    # --- the repair, instrumented ---
    qlog = QueryLog()
    phases = common.Stopwatch()
    walk_detail = common.Stopwatch()
    orig = {"compute_plan": engine.compute_plan, "apply_step": job.apply_step,
            "verify_incident": job.verify_incident, "record_baseline": verify.record_baseline,
            "export_state": verify.export_state, "execute": GraphRecorder.execute,
            "radius_actions": engine.radius_actions, "_load": engine.RepairWalk._load,
            "_supersede_load": None}
    marks: dict = {}

    def compute_plan(**kw):
        llm.reset_client()
        qlog.active = marks["in_walk"] = True
        try:
            with phases("walk"):
                plan = orig["compute_plan"](**kw)
        finally:
            qlog.active = marks["in_walk"] = False
        marks["walk_client"] = (llm.get_client().calls, llm.get_client().hits)
        marks["walk_queries"] = qlog.top(10)
        marks["walk_query_count"] = sum(qlog.count.values())
        return plan

    def apply_step(graph_, step):
        with phases("apply"):
            return orig["apply_step"](graph_, step)

    def verify_incident(*a, **kw):
        llm.reset_client()
        with phases("verify"):
            return orig["verify_incident"](*a, **kw)

    def record_baseline(**kw):
        with phases("verify: record_baseline (full replay)"):
            n = orig["record_baseline"](**kw)
        marks["baseline_actions"] = n
        marks["baseline_client"] = (llm.get_client().calls, llm.get_client().hits)
        return n

    def drafted(seconds):
        phases.phases[DRAFTS] = phases.phases.get(DRAFTS, 0.0) + seconds

    def export_state(**kw):
        with phases("verify: export_state"):
            return orig["export_state"](**kw)

    def execute(self, *a, **k):
        if not marks.get("in_walk"):
            return orig["execute"](self, *a, **k)
        with walk_detail("agent re-execution (incl. model cache)"):
            return orig["execute"](self, *a, **k)

    def radius(*a, **k):
        with walk_detail("radius_actions"):
            return orig["radius_actions"](*a, **k)

    def load(self, ids):
        with walk_detail("RepairWalk._load (action details)"):
            marks["load_calls"] = marks.get("load_calls", 0) + 1
            return orig["_load"](self, ids)

    saved_q = qlog.install()
    engine.compute_plan, job.apply_step, job.verify_incident = compute_plan, apply_step, verify_incident
    verify.record_baseline, verify.export_state = record_baseline, export_state
    engine.radius_actions, engine.RepairWalk._load = radius, load
    try:
        common.log("repair: flag_source(via=cli) + run_repair")
        watch = Decidability()
        t0 = watch.t0
        incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=_actor(), reason="bench",
                                        via=Incident.Via.CLI)
        flag_s = time.perf_counter() - t0
        watch.incident_id = incident.pk
        GraphRecorder.execute = execute
        t1 = time.perf_counter()
        with drafting(with_drafting, drafted):
            incident = job.run_repair(incident_id=incident.pk)
        total_s = time.perf_counter() - t1
        repaired_s = time.perf_counter() - t0
    finally:
        engine.compute_plan, job.apply_step = orig["compute_plan"], orig["apply_step"]
        job.verify_incident = orig["verify_incident"]
        verify.record_baseline, verify.export_state = orig["record_baseline"], orig["export_state"]
        GraphRecorder.execute = orig["execute"]
        engine.radius_actions, engine.RepairWalk._load = orig["radius_actions"], orig["_load"]
        QueryLog.uninstall(saved_q)
    res["load_avg"]["repair"] = common.load_avg()
    incident.refresh_from_db()
    decided = watch.finish(_items(incident)) if with_drafting else {}
    counts = incident.counts or {}
    reexec = counts.get("rerun_changed", 0) + counts.get("rerun_same", 0)
    executed = reexec + counts.get("new", 0)

    edges_after, status = edges_and_statuses(graph)
    minimum = minimum_reexecutions(edges_before | edges_after, status)
    engine_set = {a for a, s in status.items() if s in ("rerun_changed", "rerun_same")}
    walk = phases.phases.get("walk", 0.0)
    apply = phases.phases.get("apply", 0.0)
    verify_s = phases.phases.get("verify", 0.0)
    baseline_s = phases.phases.get("verify: record_baseline (full replay)", 0.0)
    res["repair"] = {
        "status": incident.status, "error": incident.error, "blast_radius": incident.blast_radius,
        "radius_share": incident.blast_radius / summary["actions"] if summary["actions"] else None,
        "counts": counts, "verification": {k: (incident.verification or {}).get(k) for k in ("facts", "decisions", "effects")},
        "flag_s": flag_s, "total_s": total_s, "phases": dict(phases.phases), "flag_to_repaired_s": repaired_s,
        "flag_to_applied_s": decided.get("applied_s"), "flag_to_first_decidable_s": decided.get("first_s"), "flag_to_all_decidable_s": decided.get("all_s"),
        "decidable_poll_s": decided.get("poll_s"),
        "drafts_s": phases.phases.get(DRAFTS),
        "drafted_items": _items(incident),
        "other_s": total_s - walk - apply - verify_s - phases.phases.get(DRAFTS, 0.0),
        "walk_detail": dict(walk_detail.phases), "walk_queries": marks.get("walk_queries"),
        "walk_query_count": marks.get("walk_query_count"), "load_calls": marks.get("load_calls"),
        "walk_model": marks.get("walk_client"), "baseline_model": marks.get("baseline_client"),
        "reexecuted": reexec, "executed_incl_new": executed,
        "reexec_per_s_walk": executed / walk if walk else None,
        "reexec_per_s_walk_apply": executed / (walk + apply) if walk + apply else None,
        "minimum": len(minimum), "excess": len(engine_set - minimum), "missed": len(minimum - engine_set),
        "plan_steps": (incident.plan or {}).get("step_count", len((incident.plan or {}).get("steps", []))),
    }
    # The repair's own check re-ran what the source could change; the whole-desk replay, in the same run.
    v = incident.verification or {}
    res["verification"] = {"scope": v.get("scope"), "set": v.get("set_size"), "actions_rerun": v.get("actions_rerun"),
                           "seconds": v.get("seconds"), "replay_calls": v.get("replay_calls"),
                           "diff": [v.get(k) for k in ("facts", "decisions", "effects")]}
    if v.get("scope") == "radius":
        from repairs.deep_check import verify_full

        common.log("repair: verify --full (the whole-desk replay, beside the repair's own check)")
        t2 = time.perf_counter()
        full = verify_full(incident=incident, actor=None, reason="bench", via=Incident.Via.CLI)
        baseline_s, marks["baseline_actions"] = time.perf_counter() - t2, full["actions_rerun"]
        res["verification"]["full"] = {"actions_rerun": full["actions_rerun"], "seconds": baseline_s,
                                       "replay_calls": full["replay_calls"],
                                       "diff": [full[k] for k in ("facts", "decisions", "effects")]}
    base_n = marks.get("baseline_actions") or 0
    res["full_replay"] = {"actions": base_n, "seconds": baseline_s,
                          "actions_per_s": base_n / baseline_s if baseline_s else None}
    _tables(res)
    return res


def _items(incident) -> int:
    from compensation.models import CompensationItem

    return CompensationItem.objects.filter(incident=incident).count()


def drafting_probe(sizes: list[int]) -> list[dict]:
    """Compensation drafting time against desk size (the drafting receivers, timed alone)."""
    import repairs.job as job
    import repairs.services as services
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs.models import Incident

    out = []
    for n in sizes:
        common.log(f"repair: drafting probe, {n:,} tickets")
        name = f"bench-drafting-{n}"
        desk_run(workspace=name, tickets=n, seed=SEED, reason="bench")
        ws = Workspace.objects.get(name=name)
        incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=_actor(), reason="bench",
                                        via=Incident.Via.CLI)
        t = {"s": 0.0}
        with drafting(True, lambda seconds: t.__setitem__("s", t["s"] + seconds)):
            incident = job.run_repair(incident_id=incident.pk)
        items = _items(incident)
        out.append({"tickets": n, "radius": incident.blast_radius, "items": items, "seconds": t.get("s"),
                    "ms_per_item": t["s"] / items * 1e3 if items and t.get("s") else None})
    common.table("Compensation drafting after a repair (the job's draft step)",
                 ["tickets", "blast radius", "items drafted", "seconds", "ms per item"],
                 [[d["tickets"], d["radius"], d["items"], d["seconds"], d["ms_per_item"]] for d in out],
                 [f"ms per item, largest / smallest desk: {_growth(out):.2f} (flat = linear drafting)"])
    return out


def _growth(out: list[dict]) -> float:
    per = [d["ms_per_item"] for d in out if d.get("ms_per_item")]
    return per[-1] / per[0] if len(per) > 1 else float("nan")


def _tables(res: dict) -> None:
    r, rec, fr, warm = res["repair"], res["record"], res["full_replay"], res["replay_warming"]
    ph = r["phases"]
    walk, apply = ph.get("walk", 0.0), ph.get("apply", 0.0)
    rows = [
        ["record: desk_run (live effects, cold model cache)", rec["actions"], rec["seconds"], rec["actions_per_s"],
         f"{rec['model_calls']:,} computed / {rec['cache_hits']:,} cached"],
        ["full replay #1 (warms clean answers)", warm["actions"], warm["seconds"], warm["actions_per_s"],
         f"{warm['model_calls']:,} computed / {warm['cache_hits']:,} cached"],
        ["repair: walk (compute_plan)", r["executed_incl_new"], walk, r["reexec_per_s_walk"],
         _model(r["walk_model"])],
        ["repair: apply (plan steps)", r["plan_steps"], apply, None, ""],
        ["repair: walk + apply", r["executed_incl_new"], walk + apply, r["reexec_per_s_walk_apply"], ""],
        ["repair: verify (total)", res["verification"]["actions_rerun"], ph.get("verify", 0.0), None, ""],
        [f"  verify ({res['verification']['scope']}): re-run of the set of {res['verification']['set']}",
         res["verification"]["actions_rerun"], res["verification"]["seconds"], None,
         f"{res['verification']['replay_calls']} replay calls"],
        ["  beside it: verify --full = whole-desk replay (same run)", fr["actions"], fr["seconds"],
         fr["actions_per_s"], f"{(res['verification'].get('full') or {}).get('replay_calls', '')} replay calls"],
        ["  verify: export_state x2", None, ph.get("verify: export_state", 0.0), None, ""],
        ["drafts (compensation receivers)" + ("" if res["drafting"] else ": switched off, see the drafting table"),
         r["drafted_items"], r["drafts_s"], None, ""],
        ["repair: other (plan to Postgres, signals, bookkeeping)", None, r["other_s"], None, ""],
        ["repair: run_repair total", r["executed_incl_new"], r["total_s"], None, ""],
    ]
    common.table(f"Repair of a generated desk: {res['tickets']:,} tickets, {rec['actions']:,} actions, "
                 f"flagged partner-blog/policy-update",
                 ["phase", "actions / steps", "seconds", "actions/s", "model calls"], rows,
                 [f"blast radius {r['blast_radius']:,} ({r['radius_share']:.0%} of the desk); counts {r['counts']}; "
                  f"verification diff {r['verification']}; incident {r['status']} {r['error'] or ''}",
                  "actions/s on walk rows = re-executed (rerun_changed + rerun_same) + new actions per second; "
                  "target >= 500/s with cached model calls",
                  f"load average: {res['load_avg']}"])
    speed = (fr["seconds"] / (walk + apply)) if walk + apply else None
    common.table("Repair vs full replay, and re-executions vs the minimum",
                 ["measure", "value"],
                 [["re-executed (rerun_changed + rerun_same)", r["reexecuted"]],
                  ["new actions", r["counts"].get("new", 0)],
                  ["minimum (live actions with a poisoned/changed/superseded/new predecessor)", r["minimum"]],
                  ["re-executed but not in the minimum (excess)", r["excess"]],
                  ["in the minimum but not re-executed (missed)", r["missed"]],
                  ["verification re-ran (radius) / full replay actions",
                   f"{res['verification']['actions_rerun']} / {fr['actions']}"],
                  ["verification seconds (radius) / full replay seconds",
                   f"{res['verification']['seconds']} / {fr['seconds']:.2f}"],
                  ["verification diff (radius) / (full)",
                   f"{res['verification']['diff']} / {(res['verification'].get('full') or {}).get('diff')}"],
                  ["full replay actions", fr["actions"]],
                  ["full replay seconds (cached model calls)", fr["seconds"]],
                  ["repair walk + apply seconds", walk + apply],
                  ["full replay / (walk + apply)", speed],
                  ["re-executed + new per second (walk + apply)", r["reexec_per_s_walk_apply"]],
                  ["meets >= 500/s", (r["reexec_per_s_walk_apply"] or 0) >= 500]])
    if res["drafting"]:
        common.table("Flag to decision: when a reviewer may decide the items, beside flag to repaired",
                     ["measure", "seconds"],
                     [["flag -> plan applied (verifying: items may be decided once drafted)", r["flag_to_applied_s"]],
                      ["flag -> first item decidable", r["flag_to_first_decidable_s"]],
                      ["flag -> all items decidable", r["flag_to_all_decidable_s"]],
                      [f"  of which drafting ({r['drafted_items']:,} items)", r["drafts_s"]],
                      ["flag -> repaired (baseline: verified, items may execute)", r["flag_to_repaired_s"]],
                      [f"  of which verification ({res['verification']['scope']}: "
                       f"{res['verification']['actions_rerun']} actions re-run)", res["verification"]["seconds"]],
                      [f"beside it: verify --full ({fr['actions']:,} actions re-run, same run)", fr["seconds"]]],
                     [f"decidable = incident verifying or repaired with its items drafted, polled from another "
                      f"connection every {r['decidable_poll_s']} s; target <= 30 s at ~100k actions"])
    wd = r["walk_detail"]
    rows = [[k, v] for k, v in sorted(wd.items(), key=lambda kv: -kv[1])]
    rows += [[f"query {name} x{n:,}", s] for name, n, s in (r["walk_queries"] or [])]
    common.table("Where the walk spends its time (seconds, overlapping)", ["part", "seconds"], rows,
                 [f"{r['walk_query_count']:,} graph queries in the walk; RepairWalk._load called {r['load_calls']:,} times"])


def _model(pair) -> str:
    if not pair:
        return ""
    calls, hits = pair
    return f"{calls:,} computed / {hits:,} cached"
