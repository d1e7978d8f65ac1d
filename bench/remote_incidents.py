"""Benchmark: a desk of remote agents with many incidents, and what each costs in replay calls.

The agents run in the bench process under kintsugi_client.Desk, recorded over HTTP (gunicorn on loopback,
as `bench agents` runs it) and serving kintsugi's signed replays on a port of their own (serve_replays):
- `bench_rscout` ingests one of S knowledge-base pages and writes `policy/<topic>`;
- `bench_rtriage` works a ticket: reads its topic's policy (every other ticket the previous page's too) and
  hands off to `bench_rpayouts`, which refunds when a policy it read says "full refund".
Every page is then flagged one after another, each incident repaired in this process as a worker would
(repairs.job.run_repair) and, beside it, verified again by the whole-desk replay (`verify --full`,
repairs.deep_check.verify_full). The replay server counts the signed POSTs it answers by their
`purpose` (repair, verification), so the figures are what the remote agents were asked to do:
per incident, the repair's replays, the radius verification's and the full replay's.
Target: the radius verification asks at most twice the repair's replays.
"""
from __future__ import annotations

import time
from collections import Counter

from bench import common

WORKSPACE = "bench-remote-incidents"
AGENTS = ("bench_rscout", "bench_rtriage", "bench_rpayouts")
SIZES = {"full": (12, 8), "quick": (3, 3)}  # pages flagged one after another, tickets per page


def _desk(client, secrets: dict):
    from kintsugi_client import Desk

    desk = Desk(client, replay_secret=secrets)

    @desk.agent("bench_rscout")
    def scout(rec, p):
        rec.set(f"policy/{p['topic']}", rec.ingest(p["source"]) or "no policy")
        return {"topic": p["topic"]}

    @desk.agent("bench_rtriage")
    def triage(rec, p):
        refund = any(["full refund" in str(rec.get(f"policy/{t}", "")) for t in p["topics"]])  # reads every one
        rec.handoff("bench_rpayouts", {"ticket": p["ticket"], "refund": refund})
        return {"choice": "refund" if refund else "deny"}

    @desk.agent("bench_rpayouts")
    def payouts(rec, p):
        if p["refund"]:
            rec.effect("refund", amount=2500, ticket=p["ticket"], external=True)
        return {"paid": p["refund"]}

    return desk


def _workspace(admin, replay_url: str, pages: int):
    from provenance.models import AgentRegistration, Source, Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent

    # A workspace of its own per run: an earlier run's incidents keep theirs (incidents protect it).
    ws = Workspace.objects.create(name=f"{WORKSPACE}-{time.time_ns() // 1_000_000}")
    for n in range(pages):  # every page poisoned: each flag has work to repair
        Source.objects.create(workspace=ws, source_id=f"kb/page-{n}", content=f"topic {n}: full refund for all")
    for agent in AGENTS:
        register_agent(workspace=ws, name=agent, replay=replay_url, actor=admin, reason="bench", via="cli")
    secrets = {r.name: r.replay_secret for r in AgentRegistration.objects.filter(workspace=ws)}
    _, key = issue_agent_token(workspace=ws, label="bench", actor=admin, reason="bench", via="cli")
    return ws, key, secrets


def run(quick: bool, *, pages: int | None = None, tickets: int | None = None) -> dict:
    from django.contrib.auth import get_user_model

    from bench.agents import _server
    from kintsugi_client import Client
    from provenance.graph import queries
    from provenance.graph.graph import workspace_graph
    from repairs.deep_check import verify_full
    from repairs.job import run_repair
    from repairs.models import Incident
    from repairs.services import flag_source

    default_pages, default_tickets = SIZES["quick" if quick else "full"]
    pages, tickets = pages or default_pages, tickets or default_tickets
    admin, _ = get_user_model().objects.get_or_create(username="bench-remote", defaults={"is_superuser": True})
    replay_port = common._free_port()
    ws, key, secrets = _workspace(admin, f"http://127.0.0.1:{replay_port}/replay", pages)
    asked: Counter = Counter()
    web_port = common._free_port()
    web = _server(web_port)
    desk = _desk(Client(f"http://127.0.0.1:{web_port}", key), secrets)
    replays = desk.serve_replays("127.0.0.1", replay_port, block=False,
                                 verify=lambda request, headers: asked.update([request.get("purpose")]))
    try:
        t0 = time.perf_counter()
        for n in range(pages):
            desk.run_root("bench_rscout", {"source": f"kb/page-{n}", "topic": n})
            for t in range(tickets):
                # Every other ticket also reads the previous page's policy (written before it: page 0's
                # tickets find none): incidents overlap, and the re-runs of a page's tickets come out the
                # same while the other page they read still says "full refund".
                topics = [n] if t % 2 else [n, n - 1]
                desk.run_root("bench_rtriage", {"topics": topics, "ticket": f"p{n}-t{t}"})
        record_s = time.perf_counter() - t0
        web.terminate()  # the replays call back the worker's own server, never the web server
        web.wait(timeout=20)
        actions = workspace_graph(ws.name).ro_query(queries.ACTION_COUNT)[0][0]
        common.log(f"remote-incidents: {actions} actions recorded over HTTP in {record_s:.1f}s; flagging {pages} pages")
        rows = []
        for n in range(pages):
            asked.clear()
            t0 = time.perf_counter()
            incident = flag_source(workspace=ws, source_id=f"kb/page-{n}", actor=admin, reason="bench", via="cli")
            incident = run_repair(incident_id=incident.pk)
            repair_s = time.perf_counter() - t0
            repair_calls, radius_calls = asked["repair"], asked["verification"]
            asked.clear()
            t0 = time.perf_counter()
            full = verify_full(incident=incident, actor=None, reason="bench", via=Incident.Via.CLI)
            full_s = time.perf_counter() - t0
            v = incident.verification or {}
            rows.append({"incident": incident.pk, "source": incident.source_id, "status": incident.status,
                         "radius": incident.blast_radius, "repair_calls": repair_calls,
                         "radius_calls": radius_calls, "radius_calls_recorded": v.get("replay_calls"),
                         "full_calls": asked["verification"], "full_calls_recorded": full["replay_calls"],
                         "repair_s": repair_s, "radius_s": v.get("seconds"), "full_s": full_s,
                         "diff": [v.get(k) for k in ("facts", "decisions", "effects")],
                         "full_diff": [full[k] for k in ("facts", "decisions", "effects")]})
    finally:
        if web.poll() is None:
            web.terminate()
            web.wait(timeout=20)
        replays.shutdown()
        replays.server_close()
    out = {"pages": pages, "tickets_per_page": tickets, "actions": actions, "record_s": record_s, "incidents": rows}
    out["worst_ratio"] = max((r["radius_calls"] / r["repair_calls"] for r in rows if r["repair_calls"]), default=None)
    out["meets_2x"] = all(r["radius_calls"] <= 2 * r["repair_calls"] for r in rows)
    _table(out)
    return out


def _table(out: dict) -> None:
    rows = out["incidents"]
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("repair_calls", "radius_calls", "full_calls")} if rows else {}
    common.table(f"Remote agents, {len(rows)} incidents flagged one after another ({out['actions']} actions, "
                 f"{out['pages']} pages x {out['tickets_per_page']} tickets)",
                 ["incident", "status", "radius", "repair replays", "radius verification replays",
                  "verify --full replays", "verification / repair", "repair s", "radius verify s", "full s",
                  "diff (radius / full)"],
                 [[r["incident"], r["status"], r["radius"], r["repair_calls"], r["radius_calls"], r["full_calls"],
                   (r["radius_calls"] / r["repair_calls"]) if r["repair_calls"] else None, r["repair_s"],
                   r["radius_s"], r["full_s"], f"{r['diff']} / {r['full_diff']}"] for r in rows],
                 [f"per incident, mean: repair {mean.get('repair_calls', 0):.1f}, radius verification "
                  f"{mean.get('radius_calls', 0):.1f}, verify --full {mean.get('full_calls', 0):.1f} replay calls",
                  f"target: radius verification <= 2x the repair's replays: {'met' if out['meets_2x'] else 'NOT met'} "
                  f"(worst {out['worst_ratio'] or 0:.2f})",
                  "replays counted by the agents' replay server (kintsugi_client.Desk.serve_replays) by purpose; "
                  "repair s = flag + run_repair (walk, apply, drafting, radius verification)",
                  f"load average {common.load_avg()}"])
