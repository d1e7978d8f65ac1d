"""Benchmark 2: blast radius end to end (Python call → list of action ids), at 10k / 100k / 1M actions.

The graphs are built with UNWIND batch loads in the shape the recorder writes:
(:Action {id, seq, agent, ticket, status})-[:FEEDS|HANDED_OFF]->(:Action), (:Action)-[:INGESTED]->(:Source),
(:Action)-[:WROTE|READ]->(:Fact), (:Action)-[:CAUSED]->(:Effect). Topology: the support desk (research
writes refund_policy and vip_rules, one research action ingests the flagged page; triage reads
refund_policy and, for VIP claims, the poisoned vip_rules; triage hands off to refund (60%) or the
notifier; refund hands off to the notifier) plus customer memory: the notifier writes cust:<c> and a
later triage of the same customer reads it 20% of the time, which adds FEEDS chains across tickets
(depth > 3). VIP_SHARE is set so that about a third of the actions are downstream of the flagged page;
0.5% of the ticket actions carry status 'superseded' so the dead-status filter is exercised.

Every variant's answer is checked against a plain Python BFS over the same edge list.
"""
from __future__ import annotations

import random
import time
from collections import deque

from bench import common
from provenance.vocabulary import DEAD

FLAGGED = "partner-blog/policy-update"
SOURCES = ["acme/refund-policy", "acme/vip-program", FLAGGED]
VIP_SHARE = 0.29
MEMORY_READ = 0.2
REFUND_SHARE = 0.6
TICKETS_PER_CUSTOMER = 4
DEAD_SHARE = 0.005
BATCH = 20_000

# --- candidate queries (one round trip each) ---
_BFS = """
MATCH (:Source {id: $source})<-[:INGESTED]-(a0:Action)
CALL algo.BFS(a0, -1, %s) YIELD nodes
"""
_LIVE = "NOT n.status IN ['poisoned', 'superseded']"
BFS_ROWS = _BFS % "NULL" + f"""UNWIND nodes + [a0] AS n
WITH DISTINCT n WHERE n:Action AND {_LIVE}
RETURN n.id ORDER BY n.seq
"""
BFS_COLLECT = _BFS % "NULL" + f"""UNWIND nodes + [a0] AS n
WITH DISTINCT n WHERE n:Action AND {_LIVE}
WITH n ORDER BY n.seq
RETURN collect(n.id)
"""
BFS_STRING = _BFS % "NULL" + f"""UNWIND nodes + [a0] AS n
WITH DISTINCT n WHERE n:Action AND {_LIVE}
WITH n ORDER BY n.seq
RETURN string.join(collect(toString(n.id)), ',')
"""
# No DISTINCT / ORDER BY on the server: one "id:seq,id:seq" string per ingester, merged and sorted in Python.
BFS_PAIRS = _BFS % "NULL" + f"""RETURN string.join([n IN nodes + [a0] WHERE n:Action AND {_LIVE} |
                    toString(n.id) + ':' + toString(n.seq)], ',')
"""
DOWNSTREAM_PAIRS = _BFS % "'DOWNSTREAM'" + f"""RETURN string.join([n IN nodes + [a0] WHERE {_LIVE} |
                    toString(n.id) + ':' + toString(n.seq)], ',')
"""
VARLEN_COLLECT = f"""
MATCH (:Source {{id: $source}})<-[:INGESTED]-(a0:Action)-[:FEEDS|HANDED_OFF*0..]->(n:Action)
WITH DISTINCT n WHERE {_LIVE}
WITH n ORDER BY n.seq
RETURN collect(n.id)
"""
PG_CTE = """
WITH RECURSIVE r(id) AS (
    SELECT action FROM {p}_ingests WHERE source = %s
  UNION
    SELECT e.dst FROM {p}_edges e JOIN r ON e.src = r.id
)
SELECT a.id FROM r JOIN {p}_actions a ON a.id = r.id
WHERE a.status NOT IN ('poisoned', 'superseded') ORDER BY a.seq
"""


# --- graph generation ---
class DeskGraph:
    """Rows for a desk-shaped graph of about n actions (ids = seq order)."""

    def __init__(self, n_actions: int, seed: int = 1):
        rng = random.Random(seed)
        self.actions: list[tuple] = []  # (id, agent, ticket, status)
        self.facts: list[tuple] = []  # (writer, fact id, key)
        self.effects: list[tuple] = []  # (action, effect id, kind, amount)
        self.feeds: list[tuple] = []  # (writer, reader)
        self.handoffs: list[tuple] = []  # (parent, child)
        self.reads: list[tuple] = []  # (reader, fact id)
        self.ingests: list[tuple] = []  # (action, source)
        aid = fid = eid = 0

        def new_action(agent, ticket):
            nonlocal aid
            aid += 1
            status = "superseded" if ticket and rng.random() < DEAD_SHARE else "ok"
            self.actions.append((aid, agent, ticket, status))
            return aid

        def new_fact(writer, key):
            nonlocal fid
            fid += 1
            self.facts.append((writer, fid, key))
            return fid

        def new_effect(action, kind):
            nonlocal eid
            eid += 1
            self.effects.append((action, eid, kind, rng.randint(20, 200) * 100 if kind == "refund" else 0))

        research = []
        for source in SOURCES:
            a = new_action("research", None)
            self.ingests.append((a, source))
            research.append(a)
        refund_policy = new_fact(research[0], "refund_policy")
        new_fact(research[1], "vip_rules")
        poisoned_vip = new_fact(research[2], "vip_rules")
        tickets = max(1, round((n_actions - 3) / (1 + REFUND_SHARE + 1)))
        customers = max(1, tickets // TICKETS_PER_CUSTOMER)
        last_note: dict[int, tuple[int, int]] = {}
        for t in range(tickets):
            ticket = f"t{t:07d}"
            c = rng.randrange(customers)
            tri = new_action("triage", ticket)
            self.reads.append((tri, refund_policy))
            self.feeds.append((research[0], tri))
            if rng.random() < VIP_SHARE:
                self.reads.append((tri, poisoned_vip))
                self.feeds.append((research[2], tri))
            if c in last_note and rng.random() < MEMORY_READ:
                writer, note = last_note[c]
                self.reads.append((tri, note))
                self.feeds.append((writer, tri))
            parent = tri
            if rng.random() < REFUND_SHARE:
                ref = new_action("refund", ticket)
                self.handoffs.append((tri, ref))
                self.reads.append((ref, refund_policy))
                self.feeds.append((research[0], ref))
                new_effect(ref, "refund")
                parent = ref
            note = new_action("notifier", ticket)
            self.handoffs.append((parent, note))
            new_effect(note, "email")
            last_note[c] = (note, new_fact(note, f"cust:{c}"))
        self.n = aid

    def edges(self) -> list[tuple[int, int]]:
        return self.feeds + self.handoffs

    def nodes_edges(self) -> tuple[int, int]:
        nodes = len(self.actions) + len(self.facts) + len(self.effects) + len(SOURCES)
        edges = (len(self.facts) + len(self.effects) + len(self.feeds) + len(self.handoffs) + len(self.reads)
                 + len(self.ingests))
        return nodes, edges


NODE_LOADS = [
    ("actions", "UNWIND $rows AS r CREATE (:Action {id: r[0], seq: toFloat(r[0]), agent: r[1], ticket: r[2], "
                "status: r[3]})"),
    ("facts", "UNWIND $rows AS r CREATE (:Fact {id: r[1], key: r[2], active: true})"),
    ("effects", "UNWIND $rows AS r CREATE (:Effect {id: r[1], kind: r[2], amount: r[3], live: true})"),
]
# Edges by internal node id (NodeByIdSeek): the graph is new, so internal ids follow creation order.
EDGE_LOAD = ("UNWIND $rows AS r WITH r[0] AS x, r[1] AS y MATCH (a) WHERE ID(a) = x MATCH (b) WHERE ID(b) = y "
             "CREATE (a)-[:{rel}]->(b)")


class InternalIds:
    """Internal node ids of a freshly loaded graph: sources, then actions, facts, effects, in order."""

    def __init__(self, desk: DeskGraph):
        self.source = {s: i for i, s in enumerate(SOURCES)}
        self.action0 = len(SOURCES) - 1  # action ids start at 1
        self.fact0 = self.action0 + len(desk.actions)
        self.effect0 = self.fact0 + len(desk.facts)

    def action(self, i: int) -> int:
        return self.action0 + i

    def fact(self, i: int) -> int:
        return self.fact0 + i

    def effect(self, i: int) -> int:
        return self.effect0 + i


def _batches(graph, cypher: str, rows: list) -> None:
    for i in range(0, len(rows), BATCH):
        graph.query(cypher, {"rows": rows[i:i + BATCH]})


def load_falkordb(graph, desk: DeskGraph) -> float:
    """UNWIND batch load of the same node and edge shape the recorder writes."""
    t0 = time.perf_counter()
    graph.query("UNWIND $ids AS s CREATE (:Source {id: s})", {"ids": SOURCES})
    for kind, cypher in NODE_LOADS:
        _batches(graph, cypher, [list(r) for r in getattr(desk, kind)])
    ids = InternalIds(desk)
    for label, key, expect in (("Action", desk.actions[-1][0], ids.action(desk.actions[-1][0])),
                               ("Fact", desk.facts[-1][1], ids.fact(desk.facts[-1][1])),
                               ("Effect", desk.effects[-1][1], ids.effect(desk.effects[-1][1]))):
        got = graph.ro_query(f"MATCH (n:{label} {{id: $id}}) RETURN ID(n)", {"id": key})[0][0]
        if got != expect:
            raise RuntimeError(f"internal ids do not follow creation order ({label} {key}: {got} != {expect})")
    a = ids.action
    _batches(graph, EDGE_LOAD.format(rel="FEEDS"), [[a(x), a(y)] for x, y in desk.feeds])
    _batches(graph, EDGE_LOAD.format(rel="HANDED_OFF"), [[a(x), a(y)] for x, y in desk.handoffs])
    _batches(graph, EDGE_LOAD.format(rel="WROTE"), [[a(x), ids.fact(f)] for x, f, _ in desk.facts])
    _batches(graph, EDGE_LOAD.format(rel="READ"), [[a(x), ids.fact(f)] for x, f in desk.reads])
    _batches(graph, EDGE_LOAD.format(rel="CAUSED"), [[a(x), ids.effect(e)] for x, e, _, _ in desk.effects])
    _batches(graph, EDGE_LOAD.format(rel="INGESTED"), [[a(x), ids.source[s]] for x, s in desk.ingests])
    return time.perf_counter() - t0


def add_downstream_edges(graph, desk: DeskGraph) -> float:
    """The candidate schema addition: one DOWNSTREAM edge beside every FEEDS and HANDED_OFF edge."""
    t0 = time.perf_counter()
    ids = InternalIds(desk)
    _batches(graph, EDGE_LOAD.format(rel="DOWNSTREAM"), [[ids.action(x), ids.action(y)] for x, y in desk.edges()])
    return time.perf_counter() - t0


def load_postgres(desk: DeskGraph, prefix: str) -> float:
    import os

    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        for t in ("edges", "actions", "ingests"):
            conn.execute(f"DROP TABLE IF EXISTS {prefix}_{t}")
        conn.execute(f"CREATE UNLOGGED TABLE {prefix}_edges (src bigint NOT NULL, dst bigint NOT NULL)")
        conn.execute(f"CREATE UNLOGGED TABLE {prefix}_actions (id bigint PRIMARY KEY, seq double precision, "
                     f"status text)")
        conn.execute(f"CREATE UNLOGGED TABLE {prefix}_ingests (action bigint, source text)")
        with conn.cursor() as cur:
            with cur.copy(f"COPY {prefix}_edges (src, dst) FROM STDIN") as cp:
                for e in desk.edges():
                    cp.write_row(e)
            with cur.copy(f"COPY {prefix}_actions (id, seq, status) FROM STDIN") as cp:
                for a in desk.actions:
                    cp.write_row((a[0], float(a[0]), a[3]))
            with cur.copy(f"COPY {prefix}_ingests (action, source) FROM STDIN") as cp:
                for r in desk.ingests:
                    cp.write_row(r)
        conn.execute(f"CREATE INDEX ON {prefix}_edges (src)")
        conn.execute(f"CREATE INDEX ON {prefix}_ingests (source)")
        conn.execute(f"ANALYZE {prefix}_edges")
        conn.execute(f"ANALYZE {prefix}_actions")
        conn.execute(f"ANALYZE {prefix}_ingests")
    return time.perf_counter() - t0


def drop_postgres(prefix: str) -> None:
    import os

    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        for t in ("edges", "actions", "ingests"):
            conn.execute(f"DROP TABLE IF EXISTS {prefix}_{t}")


# --- the contenders ---
def python_bfs(adj: dict[int, list[int]], start: list[int]) -> set[int]:
    seen = set(start)
    queue = deque(start)
    while queue:
        for b in adj.get(queue.popleft(), ()):
            if b not in seen:
                seen.add(b)
                queue.append(b)
    return seen


def _pairs_sorted(rows) -> list[int]:
    """Merge 'id:seq,...' strings (one per ingester), dedupe, order by seq."""
    seqs: dict[int, float] = {}
    for (text,) in rows:
        if text:
            for pair in text.split(","):
                i, _, q = pair.partition(":")
                seqs[int(i)] = float(q)
    return sorted(seqs, key=seqs.__getitem__)


def _paused(fn):
    from provenance.graph import mirror

    with mirror.gc_paused():
        return fn()


def _split_ids(s: str | None) -> list[int]:
    return [int(x) for x in s.split(",")] if s else []


PRODUCT = "selectors.radius_actions (product: topology mirror, warm)"
IN_GRAPH = "selectors.radius_actions_in_graph (one algo.BFS, id:seq)"
IN_GRAPH_PAUSED = "selectors.radius_actions_in_graph, GC paused (as the cold path runs it)"
PRODUCT_IDS = "selectors.reachable ids only (level-wise BFS)"
PG = "Postgres recursive CTE (UNION) + seq order"
PY = "Python BFS on dicts (preloaded adjacency)"
DOWNSTREAM = "algo.BFS 'DOWNSTREAM' (extra edge type), id:seq string"


def contenders(graph, raw, desk: DeskGraph, prefix: str, *, with_varlen: bool, varlen_timeout_ms: int):
    """label → (callable returning ids, how to check). Everything returns live ids in seq order, except
    'reachable ids only' (an unordered set that still includes dead actions, as the product returns it)."""
    import os

    import psycopg

    from provenance.recording import selectors

    adj: dict[int, list[int]] = {}
    for a, b in desk.edges():
        adj.setdefault(a, []).append(b)
    status = {a[0]: a[3] for a in desk.actions}
    starts = [a for a, s in desk.ingests if s == FLAGGED]
    pg = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    cte = PG_CTE.format(p=prefix)
    server_ms: dict[str, list[float]] = {}

    def q(label, cypher, timeout=None):
        res = raw.ro_query(cypher, {"source": FLAGGED}, timeout=timeout)
        server_ms.setdefault(label, []).append(res.run_time_ms)
        return res.result_set

    out = {
        PRODUCT: (lambda: [r[0] for r in selectors.radius_actions(graph, FLAGGED)], "ordered"),
        IN_GRAPH: (lambda: [r[0] for r in selectors.radius_actions_in_graph(graph, FLAGGED)], "ordered"),
        IN_GRAPH_PAUSED: (lambda: _paused(lambda: [r[0] for r in selectors.radius_actions_in_graph(graph, FLAGGED)]),
                          "ordered"),
        PRODUCT_IDS: (lambda: selectors.reachable(graph, selectors.ingesters(graph, FLAGGED)), "set"),
        "algo.BFS NULL, rows of ids": (lambda: [r[0] for r in q("algo.BFS NULL, rows of ids", BFS_ROWS)], "ordered"),
        "algo.BFS NULL, collect(id)": (lambda: q("algo.BFS NULL, collect(id)", BFS_COLLECT)[0][0], "ordered"),
        "algo.BFS NULL, string.join ids": (
            lambda: _split_ids(q("algo.BFS NULL, string.join ids", BFS_STRING)[0][0]), "ordered"),
        "algo.BFS NULL, id:seq string, Python sort": (
            lambda: _pairs_sorted(q("algo.BFS NULL, id:seq string, Python sort", BFS_PAIRS)), "ordered"),
    }
    if with_varlen:
        label = "[:FEEDS|HANDED_OFF*0..] DISTINCT, collect"
        out[label] = (lambda: q(label, VARLEN_COLLECT, timeout=varlen_timeout_ms)[0][0], "ordered")
    out[PG] = (lambda: [r[0] for r in pg.execute(cte, [FLAGGED]).fetchall()], "ordered")
    out[PY] = (lambda: sorted(i for i in python_bfs(adj, starts) if status[i] not in DEAD), "ordered")
    truth_all = python_bfs(adj, starts)
    truth = sorted(i for i in truth_all if status[i] not in DEAD)
    return out, truth, truth_all, server_ms, pg, q


def _measure(res: dict, label: str, fn, kind: str, truth, truth_all, *, repeat: int, budget: float) -> None:
    """One run; if it was quick, it counts as warm-up and `repeat` more runs follow (within `budget` s)."""
    try:
        t0 = time.perf_counter()
        result = fn()
        first = time.perf_counter() - t0
        times = [first]
        if first < 2.0:
            times, result = common.timed(fn, repeat=repeat, warmup=0, budget=budget)
    except Exception as exc:  # a timeout on the variable-length pattern
        res["variants"][label] = {"error": str(exc).splitlines()[0][:160]}
        return
    ok = set(result) == truth_all if kind == "set" else list(result) == truth
    res["variants"][label] = {"median_ms": common.median(times) * 1e3, "min_ms": min(times) * 1e3,
                              "runs": len(times), "correct": ok, "returned": len(result)}


def measure_size(size: int, *, repeat: int, with_varlen: bool) -> dict:
    from provenance.graph.graph import Graph

    common.log(f"radius: generating {size:,} actions")
    t0 = time.perf_counter()
    desk = DeskGraph(size)
    gen_s = time.perf_counter() - t0
    name = f"bench:radius-{size}"
    graph = Graph(name)
    graph.delete()
    common.log(f"radius: loading {desk.n:,} actions into FalkorDB")
    load_s = load_falkordb(graph, desk)
    prefix = f"bench_radius_{size}"
    pg_s = load_postgres(desk, prefix)
    raw = common.raw_graph(name)
    cands, truth, truth_all, server_ms, pg, q = contenders(graph, raw, desk, prefix, with_varlen=with_varlen,
                                                           varlen_timeout_ms=30_000)
    nodes, edges = desk.nodes_edges()
    res = {"actions": desk.n, "nodes": nodes, "edges": edges, "radius": len(truth),
           "radius_share": len(truth_all) / desk.n, "generate_s": gen_s, "falkordb_load_s": load_s,
           "falkordb_load_actions_per_s": desk.n / load_s, "postgres_load_s": pg_s,
           "falkordb_memory_mb": common.falkordb_memory_mb(), "load_avg": common.load_avg(), "variants": {}}
    common.log(f"radius: {len(truth):,} of {desk.n:,} downstream; measuring")
    res["mirror"] = mirror_costs(graph, desk)
    res["cold_ms"] = res["mirror"]["cold_ms"]
    from provenance.recording import selectors

    selectors.radius_actions(graph, FLAGGED)  # the product's figure is the warm one; cold ones are above
    budget = 30.0 if size >= 1_000_000 else 10.0
    for label, (fn, kind) in cands.items():
        _measure(res, label, fn, kind, truth, truth_all, repeat=repeat, budget=budget)
    # The schema candidate: a DOWNSTREAM edge beside each FEEDS/HANDED_OFF (added after the others ran, so
    # the NULL-type BFS above did not have to walk the extra edges).
    res["downstream_load_s"] = add_downstream_edges(graph, desk)
    _measure(res, DOWNSTREAM, lambda: _pairs_sorted(q(DOWNSTREAM, DOWNSTREAM_PAIRS)), "ordered", truth, truth_all,
             repeat=repeat, budget=budget)
    for label, v in res["variants"].items():
        if label in server_ms and "median_ms" in v:
            v["server_ms"] = common.median(server_ms[label])
    res["bfs_levels"] = _depth(desk)
    pg.close()
    graph.delete()
    drop_postgres(prefix)
    return res


def _depth(desk: DeskGraph) -> int:
    adj: dict[int, list[int]] = {}
    for a, b in desk.edges():
        adj.setdefault(a, []).append(b)
    frontier = [a for a, s in desk.ingests if s == FLAGGED]
    seen = set(frontier)
    depth = 0
    while frontier:
        nxt = []
        for a in frontier:
            for b in adj.get(a, ()):
                if b not in seen:
                    seen.add(b)
                    nxt.append(b)
        frontier = nxt
        depth += 1
    return depth


COLD_REPEAT = 5


def mirror_costs(graph, desk: DeskGraph, appended: int = 1_000) -> dict:
    """What the warm figure does not show: the first question in a process (answered by FalkorDB while
    the mirror is read in the background: cold_ms; build_ms is that read, timed on its own), and the first
    question after the recorder appended `appended` actions (merged by id range).
    Leaves the graph as it found it: the appended actions are deleted again."""
    import threading

    import psutil
    from django.conf import settings

    from provenance.graph import mirror, queries

    from provenance.recording import selectors

    mirror.forget()
    rss = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    with mirror.reading(graph):  # the whole topology, as the background thread reads it
        pass
    build_s = time.perf_counter() - t0
    rss_mb = (psutil.Process().memory_info().rss - rss) / 2**20
    # A process's first question, several times (each after forgetting the copy and waiting for the
    # background read it starts): the median, like every other figure here.
    settings.KINTSUGI_MIRROR_BACKGROUND = True
    colds = []
    try:
        for _ in range(COLD_REPEAT):
            mirror.forget()
            t0 = time.perf_counter()
            cold = selectors.radius_actions(graph, FLAGGED)
            colds.append(time.perf_counter() - t0)
            for thread in [t for t in threading.enumerate() if t.name == f"mirror:{graph.name}"]:
                thread.join()
    finally:
        settings.KINTSUGI_MIRROR_BACKGROUND = False
    cold_s = common.median(colds)
    cold_correct = cold == selectors.radius_actions(graph, FLAGGED)
    top = desk.n
    flagged_reader = [a for a, s in desk.ingests if s == FLAGGED][0]
    rows = [{"id": top + i, "agent": "triage", "seq": float(top + i), "ticket": f"x{i}", "payload": "{}",
             "decision": "{}", "dhash": "", "status": "ok", "root": True, "parent": None, "read_keys": [],
             "recorded_at": "", "incident": None} for i in range(1, appended + 1)]
    graph.query(queries.CREATE_ACTIONS, {"rows": rows}, append=True)
    graph.query(queries.CREATE_FEEDS, {"rows": [{"writer": flagged_reader, "reader": r["id"]} for r in rows]},
                append=True)
    graph.mark_appended(top + appended)
    t0 = time.perf_counter()
    merged = selectors.radius_actions(graph, FLAGGED)
    merge_s = time.perf_counter() - t0
    ok = merged == selectors.radius_actions_in_graph(graph, FLAGGED)
    graph.query("MATCH (a:Action) WHERE a.id > $top DELETE a", {"top": top})
    return {"build_ms": build_s * 1e3, "cold_ms": cold_s * 1e3, "cold_correct": cold_correct, "rss_mb": rss_mb,
            "appended": appended, "merge_ms": merge_s * 1e3, "merge_correct": ok}


# --- diamonds ---
def diamonds_graph(graph, layers: int) -> dict[int, list[int]]:
    """a0 ingests the source; layer i: a_i → b_i, a_i → c_i, b_i → a_{i+1}, c_i → a_{i+1}."""
    graph.delete()
    graph.query("CREATE (:Source {id: $s})", {"s": FLAGGED})
    nodes = [[1, "research", None, "ok"]]
    edges = []
    adj: dict[int, list[int]] = {}
    top = 1
    for i in range(layers):
        b, c, nxt = top + 1, top + 2, top + 3
        nodes += [[b, "triage", f"d{i}", "ok"], [c, "refund", f"d{i}", "ok"], [nxt, "notifier", f"d{i}", "ok"]]
        edges += [(top, b, "FEEDS"), (top, c, "HANDED_OFF"), (b, nxt, "FEEDS"), (c, nxt, "HANDED_OFF")]
        top = nxt
    graph.query(NODE_LOADS[0][1], {"rows": nodes})
    for t in ("FEEDS", "HANDED_OFF"):
        graph.query(f"UNWIND $rows AS r MATCH (a:Action {{id: r[0]}}), (b:Action {{id: r[1]}}) CREATE (a)-[:{t}]->(b)",
                    {"rows": [[a, b] for a, b, tt in edges if tt == t]})
    graph.query("MATCH (a:Action {id: 1}), (s:Source {id: $s}) CREATE (a)-[:INGESTED]->(s)", {"s": FLAGGED})
    for a, b, _ in edges:
        adj.setdefault(a, []).append(b)
    return adj


def diamonds(quick: bool) -> dict:
    from provenance.recording import selectors
    from provenance.graph.graph import Graph

    common.log("radius: diamonds")
    name = "bench:diamonds"
    graph = Graph(name)
    raw = common.raw_graph(name)
    adj = diamonds_graph(graph, 30)
    truth = sorted(python_bfs(adj, [1]))
    rows = []
    out = {"layers": 30, "nodes": len(truth), "variants": {}}
    for label, fn in (
        ("radius_actions (product)", lambda: [r[0] for r in selectors.radius_actions(graph, FLAGGED)]),
        ("algo.BFS NULL, collect(id)", lambda: raw.ro_query(BFS_COLLECT, {"source": FLAGGED}).result_set[0][0]),
        ("Python BFS", lambda: sorted(python_bfs(adj, [1]))),
    ):
        times, result = common.timed(fn, repeat=20, warmup=2)
        ok = list(result) == truth
        out["variants"][label] = {"median_ms": common.median(times) * 1e3, "correct": ok}
        rows.append([label, 30, len(result), common.median(times) * 1e3, ok])
    # The variable-length pattern enumerates paths: 2^layers of them.
    for layers in ((6, 10, 12) if quick else (6, 10, 12, 14, 16)):
        adj_l = diamonds_graph(graph, layers)
        expect = sorted(python_bfs(adj_l, [1]))
        t0 = time.perf_counter()
        try:
            got = raw.ro_query(VARLEN_COLLECT, {"source": FLAGGED}, timeout=15_000).result_set[0][0]
            ms = (time.perf_counter() - t0) * 1e3
            ok = list(got) == expect
        except Exception as exc:
            ms, ok, got = None, False, []
            out["variants"][f"varlen {layers}"] = {"error": str(exc).splitlines()[0][:120]}
        out["variants"][f"[:FEEDS|HANDED_OFF*0..] {layers} layers"] = {"ms": ms, "correct": ok}
        rows.append(["[:FEEDS|HANDED_OFF*0..] DISTINCT", layers, len(got), ms, ok])
        if ms is None or ms > 5_000:
            break
    graph.delete()
    common.table("Blast radius on diamonds (correctness and speed)", ["method", "layers", "actions", "ms", "correct"],
                 rows, ["correct = same ids, same seq order as a Python BFS over the edge list"])
    return out


def run(sizes: list[int], quick: bool) -> dict:
    common.aof_off()  # the big graphs are set-up, not measurement; reads do not touch the AOF anyway
    results = {"sizes": {}}
    try:
        for size in sizes:
            repeat = 3 if quick or size > 100_000 else 7
            results["sizes"][size] = measure_size(size, repeat=repeat, with_varlen=True)
        results["diamonds"] = diamonds(quick)
    finally:
        common.aof_on()
    # tables
    labels: list[str] = []
    for r in results["sizes"].values():
        labels += [k for k in r["variants"] if k not in labels]
    sizes_done = list(results["sizes"])
    rows = []
    for label in labels:
        row = [label]
        for s in sizes_done:
            v = results["sizes"][s]["variants"].get(label, {})
            if "error" in v:
                row += ["timeout", None, None, False]
            else:
                row += [v.get("median_ms"), v.get("min_ms"), v.get("server_ms"), v.get("correct")]
        rows.append(row)
    headers = ["method"]
    for s in sizes_done:
        n = _short(results["sizes"][s]["actions"])
        headers += [f"{n} med ms", f"{n} min", f"{n} server", f"{n} ok"]
    notes = []
    for s in sizes_done:
        r = results["sizes"][s]
        notes.append(f"{r['actions']:,} actions ({r['nodes']:,} nodes, {r['edges']:,} edges): radius {r['radius']:,} live "
                     f"actions ({r['radius_share']:.0%} downstream), {r['bfs_levels']} BFS levels; FalkorDB UNWIND load "
                     f"{r['falkordb_load_s']:.1f}s ({r['falkordb_load_actions_per_s']:,.0f} actions/s), "
                     f"{r['falkordb_memory_mb']:,.0f} MB; Postgres COPY+index {r['postgres_load_s']:.1f}s; "
                     f"load average {r['load_avg']}")
    notes.append("end to end = from the Python call to a list of action ids in seq order (client parse included); "
                 "server = FalkorDB's reported execution time; ok = same ids in the same order as a Python BFS over "
                 "the edge list ('reachable ids only' returns an unordered set incl. dead actions, checked as such)")
    notes.append("'DOWNSTREAM' needs a schema addition (one extra edge beside each FEEDS/HANDED_OFF); every other "
                 "FalkorDB variant runs on the graph as the recorder writes it")
    results["table"] = common.table("Blast radius end to end, ms", headers, rows, notes)
    target_rows = []
    for s in sizes_done:
        r = results["sizes"][s]
        v = r["variants"]
        prod = v.get(PRODUCT, {}).get("median_ms")
        in_graph = v.get(IN_GRAPH, {}).get("median_ms")
        paused = v.get(IN_GRAPH_PAUSED, {}).get("median_ms")
        pgv = v.get(PG, {}).get("median_ms")
        m = r["mirror"]
        target = 60 if 90_000 <= r["actions"] < 500_000 else (1000 if r["actions"] >= 500_000 else None)
        target_rows.append([f"{r['actions']:,}", prod, in_graph, (prod / in_graph) if prod and in_graph else None,
                            m["cold_ms"], (m["cold_ms"] / in_graph) if in_graph else None,
                            (m["cold_ms"] / paused) if paused else None, m["cold_correct"],
                            pgv, m["build_ms"], m["rss_mb"], m["merge_ms"], target,
                            (prod <= target and v[PRODUCT]["correct"]) if target and prod else None])
    common.table("Blast radius: the product vs one query in FalkorDB vs Postgres (median ms)",
                 ["actions", "product (warm mirror)", "algo.BFS in FalkorDB", "warm / BFS", "cold_ms", "cold / BFS",
                  "cold / BFS GC paused", "cold ok", "Postgres CTE", "mirror read ms", "mirror MB", "after 1k appended ms", "target", "meets"],
                 target_rows,
                 ["cold_ms = a process's first question: answered by one algo.BFS while the mirror is read in a "
                  "background thread (mirror read ms, timed on its own); cold / BFS GC paused = against the same query with the "
                  "garbage collector paused, as the cold path runs it (the plain BFS row pays the full collections "
                  "its objects trigger); after 1k appended = the first question "
                  "after the recorder appended 1,000 actions (merged by id range, not re-read); mirror MB = resident "
                  "memory the process grew by"])
    return results


def _short(n: int) -> str:
    return f"{n / 1e6:.0f}M" if n >= 1e6 - 1e3 else f"{n / 1e3:.0f}k"
