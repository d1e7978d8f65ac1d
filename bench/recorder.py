"""Benchmark 1: recorder throughput and per-op latency.

Two recorders run the same synthetic agents (registered here with provenance.agents.agent):
- `batched`: provenance.recording.recorder.GraphRecorder, the product's recorder (reads resolved against an
  in-memory fact mirror, graph writes queued and flushed in UNWIND batches);
- `per-op`: the article's design, one Cypher round trip per recorder op: the read-resolution query
  (MERGE READ + FOREACH MERGE FEEDS), a CREATE per write/effect/handoff, a CREATE per root action and a
  SET of the decision when an action finishes (so round trips = ops + root actions).

Ops are counted the way GraphRecorder.ops counts them: 1 per action + gets + sets + handoffs + effects.
Effects are recorded in "sandbox" mode (graph only): live dispatch (ledger row / outbox email in
Postgres) is measured separately at the smallest size.

At sizes above PER_OP_FULL_MAX actions the per-op baseline is not run from zero (it would take minutes
at a few hundred ops/s); it appends PER_OP_TAIL actions (more tickets of the same desk) to the graph the
batched recorder just built, so each of its round trips runs against a graph of that size.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from functools import wraps

from bench import common

TICKETS_PER_POLICY = 50
PER_OP_FULL_MAX = 1_000
PER_OP_TAIL = {"full": 1_000, "quick": 500}
ACTIONS_PER_TICKET = 2.6

_registered = False


def register_agents() -> None:
    """A support-desk-shaped agent set with no model calls, so the recorder is what is measured."""
    global _registered
    if _registered:
        return
    from provenance.agents import agent

    @agent("bench_policy")
    def policy(rec, p):
        rec.set("policy", f"policy version {p['v']}: refunds within 30 days")
        rec.set(f"policy_note_{p['v'] % 3}", f"note {p['v']}")
        return {"v": p["v"]}

    @agent("bench_triage")
    def triage(rec, p):
        rec.get("policy")
        rec.get(f"cust:{p['customer']}")
        rec.set(f"ticket:{p['ticket']}", "open")
        choice = "refund" if p["n"] % 5 < 3 else "reply"
        if choice == "refund":
            rec.handoff("bench_refund", {**p, "choice": choice})
        else:
            rec.handoff("bench_notify", {**p, "choice": choice, "refund": 0})
        return {"choice": choice}

    @agent("bench_refund")
    def refund(rec, p):
        rec.get("policy")
        amount = p["amount"] // 2 if p["n"] % 7 == 0 else p["amount"]
        rec.effect("refund", amount=amount, ticket=p["ticket"], reference=f"pay-{p['ticket']}")
        rec.handoff("bench_notify", {**p, "refund": amount})
        return {"amount": amount}

    @agent("bench_notify")
    def notify(rec, p):
        rec.get(f"ticket:{p['ticket']}")
        rec.set(f"cust:{p['customer']}", p["ticket"])
        rec.effect("email", amount=p.get("refund", 0), ticket=p["ticket"], subject=f"about {p['ticket']}")
        return {"template": p["choice"], "amount": p.get("refund", 0)}

    _registered = True


def roots(start_ticket: int, n_actions: int, customers: int | None = None):
    """Root (agent, payload) pairs for about n_actions actions, continuing from ticket start_ticket.
    About four tickets per customer (a customer's notifier writes cust:<c>, their next triage reads it)."""
    tickets = max(1, round(n_actions / ACTIONS_PER_TICKET))
    customers = customers or max(1, tickets // 4)
    out = []
    for i in range(start_ticket, start_ticket + tickets):
        if i % TICKETS_PER_POLICY == 0:
            out.append(("bench_policy", {"v": i // TICKETS_PER_POLICY}))
        out.append(("bench_triage", {"ticket": f"t{i:07d}", "customer": f"c{i % customers}",
                                     "n": i, "amount": 1000 + (i * 37) % 9000}))
    return out


# --- instrumentation of the product recorder (bench code only: the class is patched while measuring) ---
class Probe:
    def __init__(self) -> None:
        self.lat: dict[str, list[float]] = defaultdict(list)

    def install(self):
        from provenance.recording import recorder as R

        saved = {}
        for cls, names in ((R.ActionRecorder, ("get", "set", "handoff", "effect")),
                           (R.GraphRecorder, ("execute", "commit", "flush"))):
            for name in names:
                orig = getattr(cls, name)
                saved[(cls, name)] = orig
                setattr(cls, name, self._wrap(name, orig))
        return saved

    @staticmethod
    def uninstall(saved) -> None:
        for (cls, name), orig in saved.items():
            setattr(cls, name, orig)

    def _wrap(self, name, fn):
        bucket = self.lat[name]
        pc = time.perf_counter

        @wraps(fn)
        def inner(*a, **k):
            t0 = pc()
            try:
                return fn(*a, **k)
            finally:
                bucket.append(pc() - t0)

        return inner


def run_batched(graph, root_list, *, probe: bool) -> dict:
    from provenance.recording.recorder import GraphRecorder

    p = Probe()
    saved = p.install() if probe else None
    try:
        t0 = time.perf_counter()
        session = GraphRecorder(graph=graph, workspace="bench-recorder", sources={}, effects="sandbox",
                                   load=True)
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        for agent_name, payload in root_list:
            session.run_root(agent_name, payload)
        session.flush()
        wall = time.perf_counter() - t1
    finally:
        if saved:
            Probe.uninstall(saved)
    return {"ops": session.ops, "actions": len(session.recorded), "wall_s": wall, "load_s": load_s,
            "lat": p.lat if probe else {}}


# --- the per-op baseline ---
READ_RESOLVE = """
MATCH (f:Fact {key: $key, active: true}) WHERE f.seq < $seq
WITH f ORDER BY f.seq DESC, f.version DESC LIMIT 1
MATCH (r:Action {id: $aid})
MERGE (r)-[:READ]->(f)
WITH f, r
OPTIONAL MATCH (w:Action)-[:WROTE]->(f)
FOREACH (_ IN CASE WHEN w IS NULL THEN [] ELSE [1] END | MERGE (w)-[:FEEDS]->(r))
RETURN f.value
"""
CREATE_ROOT = """
CREATE (:Action {id: $id, agent: $agent, seq: $seq, ticket: $ticket, payload: $payload, status: 'running',
                 root: true})
"""
CREATE_CHILD = """
MATCH (p:Action {id: $parent})
CREATE (p)-[:HANDED_OFF]->(:Action {id: $id, agent: $agent, seq: $seq, ticket: $ticket, payload: $payload,
                                    status: 'running', root: false, parent: $parent})
"""
CREATE_FACT = """
MATCH (a:Action {id: $aid})
OPTIONAL MATCH (old:Fact {key: $key})
WITH a, coalesce(max(old.version), 0) + 1 AS v
CREATE (a)-[:WROTE]->(:Fact {id: $id, key: $key, value: $value, version: v, seq: $seq, active: true,
                             system_at: $at, known_at: $at})
"""
CREATE_EFFECT = """
MATCH (a:Action {id: $aid})
CREATE (a)-[:CAUSED]->(:Effect {id: $id, kind: $kind, ticket: $ticket, amount: $amount, currency: $currency,
                                details: $details, live: true, held: false, recorded_at: $at})
"""
FINISH = """
MATCH (a:Action {id: $id})
SET a.status = 'ok', a.decision = $decision, a.dhash = $dhash, a.read_keys = $read_keys
"""


class PerOpSession:
    """One Cypher round trip per recorder op, as in the article."""

    def __init__(self, graph):
        from provenance.graph import queries

        self.graph = graph
        a, f, e = graph.ro_query(queries.MAX_IDS)[0]
        self.next_action, self.next_fact, self.next_effect = (a or 0) + 1, (f or 0) + 1, (e or 0) + 1
        self.next_seq = float(self.next_action)
        self.ops = self.round_trips = self.actions = 0
        self.lat: dict[str, list[float]] = defaultdict(list)

    def q(self, kind: str, cypher: str, params: dict):
        t0 = time.perf_counter()
        rows = self.graph.query(cypher, params)
        self.lat[kind].append(time.perf_counter() - t0)
        self.round_trips += 1
        return rows

    def alloc(self) -> tuple[int, float]:
        aid, seq = self.next_action, self.next_seq
        self.next_action += 1
        self.next_seq = max(self.next_seq + 1.0, float(self.next_action))
        return aid, seq

    def run_root(self, agent_name: str, payload: dict) -> None:
        aid, seq = self.alloc()
        self.q("action", CREATE_ROOT, {"id": aid, "agent": agent_name, "seq": seq, "ticket": payload.get("ticket"),
                                       "payload": json.dumps(payload, sort_keys=True)})
        stack = [(agent_name, payload, aid, seq)]
        while stack:
            name, data, aid, seq = stack.pop()
            rec = PerOpRecorder(self, aid, seq, data.get("ticket"))
            from provenance.agents import get_agent
            from provenance.recording.decisions import check_decision, decision_hash

            decision = check_decision(name, get_agent(name)(rec, data))
            self.q("finish", FINISH, {"id": aid, "decision": json.dumps(decision, sort_keys=True),
                                      "dhash": decision_hash(decision), "read_keys": sorted(rec.read_keys)})
            self.ops += 1
            self.actions += 1
            stack.extend(reversed(rec.children))


class PerOpRecorder:
    def __init__(self, session: PerOpSession, aid: int, seq: float, ticket):
        self.s, self.aid, self.seq, self.ticket = session, aid, seq, ticket
        self.writes: dict[str, object] = {}
        self.read_keys: set[str] = set()
        self.children: list = []

    def get(self, key, default=None):
        self.s.ops += 1
        if key in self.writes:
            return self.writes[key]
        self.read_keys.add(key)
        rows = self.s.q("get", READ_RESOLVE, {"key": key, "seq": self.seq, "aid": self.aid})
        return json.loads(rows[0][0]) if rows else default

    def set(self, key, value, **_):
        self.s.ops += 1
        self.writes[key] = value
        fid = self.s.next_fact
        self.s.next_fact += 1
        self.s.q("set", CREATE_FACT, {"aid": self.aid, "id": fid, "key": key, "value": json.dumps(value),
                                      "seq": self.seq, "at": _now()})

    def handoff(self, agent_name, payload):
        self.s.ops += 1
        cid, cseq = self.s.alloc()
        self.s.q("handoff", CREATE_CHILD, {"parent": self.aid, "id": cid, "agent": agent_name, "seq": cseq,
                                           "ticket": payload.get("ticket"), "payload": json.dumps(payload, sort_keys=True)})
        self.children.append((agent_name, payload, cid, cseq))

    def effect(self, kind, *, amount=0, ticket=None, currency="USD", **details):
        self.s.ops += 1
        eid = self.s.next_effect
        self.s.next_effect += 1
        self.s.q("effect", CREATE_EFFECT, {"aid": self.aid, "id": eid, "kind": kind, "ticket": ticket or self.ticket,
                                           "amount": amount, "currency": currency,
                                           "details": json.dumps(details, sort_keys=True), "at": _now()})


def _now() -> str:
    from provenance.recording.recorder import now_iso

    return now_iso()


def run_per_op(graph, root_list) -> dict:
    s = PerOpSession(graph)
    t0 = time.perf_counter()
    for agent_name, payload in root_list:
        s.run_root(agent_name, payload)
    wall = time.perf_counter() - t0
    return {"ops": s.ops, "actions": s.actions, "wall_s": wall, "round_trips": s.round_trips, "lat": s.lat}


# --- extra measurements ---
def live_dispatch_cost(n_tickets: int) -> dict:
    """Per-effect cost of effects='live' (sandbox ledger / outbox rows in Postgres) at a small size."""
    from django.db import transaction

    from provenance.graph.graph import Graph
    from provenance.models import Workspace
    from provenance.recording.recorder import GraphRecorder

    Workspace.objects.get_or_create(name="bench-recorder-live")
    out = {}
    for mode in ("sandbox", "live"):
        g = Graph(f"bench:recorder-{mode}")
        g.delete()
        with transaction.atomic():
            s = GraphRecorder(graph=g, workspace="bench-recorder-live", sources={}, effects=mode, load=False,
                                 run_number=int(time.time()))
            t0 = time.perf_counter()
            for a, p in roots(0, round(n_tickets * ACTIONS_PER_TICKET)):
                s.run_root(a, p)
            s.flush()
            out[mode] = (time.perf_counter() - t0, s.ops, g.ro_query("MATCH (e:Effect) RETURN count(e)")[0][0])
            transaction.set_rollback(True)
        g.delete()
    effects = out["live"][2]
    return {"sandbox_s": out["sandbox"][0], "live_s": out["live"][0], "ops": out["live"][1], "effects": effects,
            "per_effect_ms": (out["live"][0] - out["sandbox"][0]) / effects * 1000}


def hot_key_cost(versions: int) -> dict:
    """FactIndex.add + next_version when one key has many versions (each write is O(versions))."""
    from provenance.recording.recorder import FactIndex, FactVersion

    idx = FactIndex()
    t0 = time.perf_counter()
    for i in range(1, versions + 1):
        v = idx.next_version("hot")
        idx.add_version(FactVersion(i, "hot", i, v, float(i), True, i))
    total = time.perf_counter() - t0
    return {"versions": versions, "total_s": total, "us_per_write": total / versions * 1e6}


def _lat_row(name, label, lat, kinds):
    row = [name, label]
    for k in kinds:
        v = lat.get(k, [])
        row += [common.pct(v, 50) * 1e3 if v else None, common.pct(v, 95) * 1e3 if v else None]
    return row


def run(sizes: list[int], quick: bool) -> dict:
    from provenance.graph.graph import Graph

    register_agents()
    results = {"sizes": {}, "notes": []}
    thr_rows, lat_rows = [], []
    for size in sizes:
        common.log(f"recorder: batched, {size:,} actions")
        g = Graph(f"bench:recorder-{size}")
        g.delete()
        rl = roots(0, size)
        b = run_batched(g, rl, probe=True)
        lat = b["lat"]
        flushes = lat.get("flush", [])
        res = {"batched": {k: v for k, v in b.items() if k != "lat"}}
        res["batched"]["ops_per_s"] = b["ops"] / b["wall_s"]
        res["batched"]["latency_ms"] = {k: {"p50": common.pct(v, 50) * 1e3, "p95": common.pct(v, 95) * 1e3,
                                            "n": len(v), "total_s": sum(v)} for k, v in lat.items()}
        # The per-op baseline: from zero on small desks, appended to the batched graph on big ones.
        if size <= PER_OP_FULL_MAX:
            gb = Graph(f"bench:recorder-{size}-perop")
            gb.delete()
            common.log(f"recorder: per-op baseline, {size:,} actions")
            p = run_per_op(gb, rl)
            mode = "full"
            gb.delete()
        else:
            n_tail = PER_OP_TAIL["quick" if quick else "full"]
            common.log(f"recorder: per-op baseline, {n_tail:,} actions appended to the {size:,} graph")
            base_tickets = max(1, round(size / ACTIONS_PER_TICKET))
            tail = roots(base_tickets, n_tail, customers=max(1, base_tickets // 4))
            p = run_per_op(g, tail)
            mode = f"tail {p['actions']:,} on {size:,}"
        res["per_op"] = {k: v for k, v in p.items() if k != "lat"}
        res["per_op"]["ops_per_s"] = p["ops"] / p["wall_s"]
        res["per_op"]["mode"] = mode
        res["per_op"]["latency_ms"] = {k: {"p50": common.pct(v, 50) * 1e3, "p95": common.pct(v, 95) * 1e3,
                                           "n": len(v)} for k, v in p["lat"].items()}
        res["ratio"] = res["batched"]["ops_per_s"] / res["per_op"]["ops_per_s"]
        results["sizes"][size] = res
        g.delete()
        thr_rows.append([f"{b['actions']:,}", b["ops"], b["wall_s"], res["batched"]["ops_per_s"], p["ops"],
                         res["per_op"]["ops_per_s"], mode, res["ratio"], res["batched"]["ops_per_s"] >= 5000])
        amort = sum(flushes) / b["ops"] * 1e3 if b["ops"] else None
        lat_rows.append(_lat_row(f"{b['actions']:,}", "batched (call)", lat, ("get", "set", "handoff", "effect"))
                        + [common.pct(lat.get("commit", []), 50) * 1e3, common.pct(flushes, 50) * 1e3,
                           common.pct(flushes, 95) * 1e3, amort])
        lat_rows.append(_lat_row(f"{b['actions']:,}", "per-op (round trip)", p["lat"], ("get", "set", "handoff", "effect"))
                        + [common.pct(p["lat"].get("finish", []), 50) * 1e3, None, None, None])
    common.table(
        "Recorder throughput (one process, synthetic desk agents, effects=sandbox)",
        ["actions", "ops", "batched s", "batched ops/s", "per-op ops", "per-op ops/s", "per-op run",
         "batched / per-op", "batched >= 5,000"],
        thr_rows,
        ["ops = actions + gets + sets + handoffs + effects (GraphRecorder.ops); per-op = the article's "
         "one round trip per op (round trips = ops + root actions)",
         "batched ops/s includes flushes and the probes on ActionRecorder/GraphRecorder methods"])
    common.table(
        "Recorder latency per op kind, ms (p50 / p95)",
        ["actions", "recorder", "get p50", "get p95", "set p50", "set p95", "handoff p50", "handoff p95",
         "effect p50", "effect p95", "commit|finish p50", "flush p50", "flush p95", "flush per op"],
        lat_rows,
        ["batched: ActionRecorder method call (in memory) + commit (queue rows) per action; flush = one UNWIND batch "
         f"(~{2000} rows, 7 queries); 'flush per op' = all flush time / ops",
         "per-op: each op is one Cypher round trip; 'finish' sets the decision when an action ends"])
    common.log("recorder: live effect dispatch and the hot-key fact index")
    live = live_dispatch_cost(200 if quick else 400)
    hot = [hot_key_cost(n) for n in ((1_000, 4_000) if quick else (2_000, 8_000))]
    results["live_dispatch"] = live
    results["hot_key"] = hot
    common.table(
        "Recorder side costs",
        ["measure", "value"],
        [["live effect dispatch (ledger/outbox row in Postgres), ms per effect", live["per_effect_ms"]],
         ["same desk, effects=sandbox, s", live["sandbox_s"]], ["same desk, effects=live, s", live["live_s"]]]
        + [[f"FactIndex: one key written {h['versions']:,} times, us per write", h["us_per_write"]] for h in hot],
        ["a key written by every action makes FactIndex.add/next_version O(versions) per write (quadratic)"])
    return results
