"""The commit's graph write in each form it could take, timed side by side in one run: the rows of one
root of bench.agents (2 actions, 2 facts read back, a handoff, a feed, an effect) per commit, and a desk
run's flush of 250 roots (2,250 rows, about what a flush of FLUSH_EVERY holds).

- `a query per kind, a round trip each` (the baseline: how a flush was written before): the stamp's
  `pending`, then CREATE_ACTIONS … CREATE_EFFECTS one by one, then the stamp's `hwm`;
- `a query per kind, pipelined`: the same commands in one redis-py pipeline (not transactional);
- `one query, pipelined`: provenance.graph.flush_query's FLUSH and the stamp in one pipeline (not
  transactional);
- `one query, MULTI/EXEC`: the same two in a transaction (FalkorDB then runs the query on the server's
  main thread), provenance.graph.pipelined.write: what the recorder sends. (A Lua script would be the
  other way to keep them together; FalkorDB refuses GRAPH.QUERY inside one.)
Each form writes a fresh graph of its own, the forms taking turns commit by commit; every graph is checked
for the same nodes and edges afterwards.
"""
from __future__ import annotations

import time

from bench import common

FORMS = ("a query per kind, a round trip each", "a query per kind, pipelined", "one query, pipelined",
         "one query, MULTI/EXEC")
COMMITS = {"quick": 300, "full": 2_000}


def rows(roots: int, first: int) -> dict[str, list[dict]]:
    """`roots` roots of bench.agents' shape, their ids from `first` on (actions; facts and effects alike)."""
    at = "2026-12-04T00:00:00+00:00"
    out: dict[str, list[dict]] = {k: [] for k in ("actions", "handoffs", "facts", "reads", "feeds", "effects")}
    for i in range(roots):
        w, r, f = first + 2 * i, first + 2 * i + 1, first + 2 * i
        base = {"ticket": f"t{i}", "payload": "{}", "decision": "{}", "dhash": "d" * 32, "status": "ok",
                "recorded_at": at, "incident": None}
        out["actions"] += [base | {"id": w, "agent": "writer", "seq": float(w), "root": True, "parent": None,
                                   "read_keys": []},
                           base | {"id": r, "agent": "reader", "seq": float(r), "root": False, "parent": w,
                                   "read_keys": [f"faq/{i}", "shared"]}]
        out["handoffs"].append({"parent": w, "child": r})
        for j, key in enumerate((f"faq/{i}", "shared")):
            out["facts"].append({"id": f + j, "writer": w, "key": key, "value": '"v"', "version": 1, "seq": float(w),
                                 "valid_from": None, "valid_until": None, "known_at": at, "system_at": at})
            out["reads"].append({"reader": r, "fact": f + j})
        out["feeds"].append({"writer": w, "reader": r})
        out["effects"].append({"id": first + i, "action": r, "kind": "note", "ticket": f"t{i}", "amount": 0,
                               "currency": "USD", "details": "{}", "held": False, "recorded_at": at, "incident": None})
    return out


def _write(form: str, graph, pending: dict, top: int) -> float:
    """Writes `pending` in `form`; FalkorDB's own execution time of its queries, ms."""
    from falkordb.query_result import QueryResult

    from provenance.graph import flush_query, pipelined, queries
    from provenance.graph.graph import _db

    per_kind = [(getattr(queries, f"CREATE_{kind.upper()}"), {"rows": pending[kind]})
                for kind in flush_query.KINDS if pending.get(kind)]
    header = graph._graph._build_params_header
    if form == FORMS[0]:
        graph.mark_appending()
        server = sum(graph._graph.query(cypher, params).run_time_ms for cypher, params in per_kind)
        graph.mark_appended(top)
        return server
    if form == FORMS[3]:
        return pipelined.write(graph, flush_query.FLUSH, flush_query.params(pending), through_action=top)
    pipe = _db(graph.url).connection.pipeline(transaction=False)
    if form == FORMS[1]:
        pipe.hset(graph.stamp_key, "pending", 1)
        for cypher, params in per_kind:
            pipe.execute_command("GRAPH.QUERY", graph.name, header(params) + cypher, "--compact")
    else:
        pipe.execute_command("GRAPH.QUERY", graph.name, header(flush_query.params(pending)) + flush_query.FLUSH,
                             "--compact")
    pipe.hset(graph.stamp_key, mapping={"hwm": top, "pending": 0})
    return sum(QueryResult(graph._graph, reply).run_time_ms for reply in pipe.execute() if isinstance(reply, list))


SHAPE = ("MATCH (a:Action) RETURN count(a)", "MATCH (f:Fact) RETURN count(f)", "MATCH (e:Effect) RETURN count(e)",
         "MATCH ()-[x]->() RETURN count(x)")


def _time(roots: int, commits: int) -> tuple[dict, dict, dict]:
    """Each form writes `commits` commits of `roots` roots to a graph of its own, the forms taking turns
    commit by commit (in a rotating order), so that a box whose load comes and goes weighs on each alike.
    Returns each form's seconds, FalkorDB's own seconds and its graph's shape."""
    from provenance.graph.graph import Graph, graph_name

    graphs = {form: Graph(graph_name(f"bench-write-{i}-{roots}")) for i, form in enumerate(FORMS)}
    for graph in graphs.values():
        graph.delete()
        graph.ro_query("MATCH (a:Action) RETURN count(a)")  # its indexes, before the clock
    seconds: dict[str, list[float]] = {form: [] for form in FORMS}
    server: dict[str, list[float]] = {form: [] for form in FORMS}
    first = 1
    for n in range(commits):
        pending, top = rows(roots, first), first + 2 * roots - 1
        for form in FORMS[n % len(FORMS):] + FORMS[:n % len(FORMS)]:
            t0 = time.perf_counter()
            inside = _write(form, graphs[form], pending, top) / 1000
            if n:  # the first commit of each warms its connection and query cache
                seconds[form].append(time.perf_counter() - t0)
                server[form].append(inside)
        first += 2 * roots
    shapes = {form: [graph.ro_query(q)[0][0] for q in SHAPE] for form, graph in graphs.items()}
    for graph in graphs.values():
        graph.delete()
    return seconds, server, shapes


def run(quick: bool) -> list[dict]:
    out = []
    for roots, commits in ((1, COMMITS["quick" if quick else "full"]), (250, 12 if quick else 40)):
        times, inside, shapes = _time(roots, commits)
        assert len({tuple(s) for s in shapes.values()}) == 1, shapes  # the same graph whatever the form
        base = common.median(times[FORMS[0]])
        for form in FORMS:
            med = common.median(times[form])
            out.append({"rows": sum(len(v) for v in rows(roots, 1).values()), "roots": roots, "form": form,
                        "median_ms": med * 1000, "p95_ms": common.pct(times[form], 95) * 1000,
                        "x_baseline": base / med, "server_ms": common.median(inside[form]) * 1000,
                        "commits": len(times[form])})
    common.table("the commit's graph write, form by form (one run, the forms taking turns commit by commit)",
                 ["rows", "form", "median ms", "p95 ms", "x a round trip per kind", "FalkorDB's own ms", "commits timed"],
                 [[r["rows"], r["form"], r["median_ms"], r["p95_ms"], r["x_baseline"], r["server_ms"], r["commits"]]
                  for r in out],
                 ["baseline: a query per kind, a round trip each (the stamp's pending and hwm around them), as "
                  "flushes were written before; the recorder sends one query and its stamp in MULTI/EXEC",
                  "FalkorDB's own ms: the median of the server's execution time of the form's queries, summed per "
                  "commit (what the client's clock adds is round trips, parsing and the box's load)",
                  f"load average {common.load_avg()}"])
    return out
