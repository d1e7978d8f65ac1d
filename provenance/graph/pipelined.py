"""Several graph commands in one round trip: a commit's reads sent together in one pipeline, and its write
sent with the stamp that says what it appended.

The write is one query (provenance.graph.flush_query), which FalkorDB applies whole or not at all, sent
with its stamp in one MULTI/EXEC: no other client's command runs between the two, so a reader never
meets the write without its stamp. MULTI/EXEC rolls nothing back, and the stamp cannot wait on the
query's answer anywhere on the server (GRAPH.QUERY may not run inside a script): after a failed query
the stamp's hwm claims actions the graph does not hold. The writer then gives the graph a new epoch at
once, and a mirror that read such a stamp before that (or one whose writer died before it could) trusts
it no further than the actions it found (provenance.graph.mirror), so a later write of the same ids is
merged. Why MULTI/EXEC rather than a plain pipeline of the same two commands: measured faster for a
commit's few rows (FalkorDB runs the query on the server's main thread, with no hand-off to a worker
thread and back) and no slower for a large flush (bench/commit_write_forms.py).
"""
from __future__ import annotations

import uuid
from typing import Any, Iterable

from provenance.graph.graph import _DOWN, Graph, GraphUnavailable, _db, _forget, server_label


def _header(graph: Graph, params: dict | None) -> str:
    # The falkordb client's own rendering of parameters (a `CYPHER name=value …` header), as Graph.query sends them.
    return graph._graph._build_params_header(params or {})


def read(graph: Graph, queries: Iterable[tuple[str, dict | None]]) -> list[list[Any]]:
    """Read-only queries sent in one pipeline: their rows, in order (each query's named row type, as
    Graph.ro_query gives them)."""
    from falkordb.query_result import QueryResult

    queries = list(queries)
    graph._ensure_schema()
    pipe = _db(graph.url).connection.pipeline(transaction=False)
    for cypher, params in queries:
        pipe.execute_command("GRAPH.RO_QUERY", graph.name, _header(graph, params) + cypher, "--compact")
    try:
        replies = pipe.execute()
    except _DOWN as exc:
        _forget(graph.url)
        raise GraphUnavailable(f"FalkorDB at {server_label(graph.url)} is unreachable: {exc}") from exc
    out = []
    for (cypher, _), reply in zip(queries, replies):
        result = QueryResult(graph._graph, reply).result_set
        row = getattr(cypher, "row", None)
        out.append([row._make(r) for r in result] if row is not None else result)
    return out


def write(graph: Graph, cypher: str, params: dict | None, *, through_action: int | None) -> float:
    """One write and its stamp in one round trip (MULTI/EXEC). `through_action`: the highest action id it appends
    (everything it adds hangs off actions above the stamp's hwm), the stamp's new hwm; None for a write
    that may change existing nodes or edges, which gives the graph a new epoch whether or not it lands.
    Returns FalkorDB's own execution time of the query, ms."""
    from falkordb.query_result import QueryResult
    from redis.exceptions import ResponseError

    graph._ensure_schema()
    pipe = _db(graph.url).connection.pipeline(transaction=True)
    pipe.execute_command("GRAPH.QUERY", graph.name, _header(graph, params) + cypher, "--compact")
    if through_action is None:
        pipe.hset(graph.stamp_key, mapping={"epoch": uuid.uuid4().hex, "pending": 0})
    else:
        pipe.hset(graph.stamp_key, mapping={"hwm": int(through_action), "pending": 0})
    try:
        reply, _ = pipe.execute(raise_on_error=False)
    except _DOWN as exc:
        _forget(graph.url)
        raise GraphUnavailable(f"FalkorDB at {server_label(graph.url)} is unreachable: {exc}") from exc
    failed = reply if isinstance(reply, ResponseError) else next(
        (r for r in reply[-1:] if isinstance(r, ResponseError)), None)  # a run-time error ends the reply
    if failed is not None:
        if through_action is not None:
            try:
                graph.mark_changed()  # the hwm just set names actions that are not there
            except GraphUnavailable:
                pass  # the mirrors' own guard holds (provenance.graph.mirror)
        raise failed
    return QueryResult(graph._graph, reply).run_time_ms
