"""`python -m bench restart [--actions N] [--quick]`: how long the embedded FalkorDB takes to start again
after a day's worth of recording (default 100,000 actions; --quick: 2,000).

A FalkorDB of its own is started the way the product starts it (core.embedded: append-only file with an
RDB preamble, rewritten once the incremental part is a tenth of the base or 4 MB). N actions are written
as the recorder writes them: batches of 20 (provenance.graph.queries CREATE_ACTIONS, CREATE_FACTS, CREATE_READS,
CREATE_FEEDS), each action writing a fact and reading its predecessor's. Then the server is killed
(SIGKILL: nothing flushed beyond what the append-only file already holds) and started again through
core.embedded, timed from the start until it answers PING; once as the recording left the file, once
right after a rewrite (the incremental part empty). Each restart must hold all N actions.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import common

BATCH = 20
GRAPH = "bench-restart"
SIZES = {"full": 100_000, "quick": 2_000}


def aof_sizes(data_dir: Path) -> dict:
    out = {"base_mb": 0.0, "incremental_mb": 0.0}
    for path in (data_dir / "appendonlydir").iterdir():
        if ".base." in path.name:
            out["base_mb"] += path.stat().st_size / 2**20
        elif ".incr." in path.name:
            out["incremental_mb"] += path.stat().st_size / 2**20
    return out


def record(url: str, actions: int, graph_name: str = GRAPH) -> tuple[float, int]:
    """Write `actions` as the recorder does into `graph_name`; the seconds it took and the append-only
    file's rewrites so far (bench soak grows the file with it before it kills FalkorDB)."""
    import redis
    from falkordb import FalkorDB

    from provenance.graph import queries

    graph = FalkorDB.from_url(url, socket_timeout=600).select_graph(graph_name)
    for statement in queries.SCHEMA:
        graph.query(statement)
    now = time.time()
    t0 = time.perf_counter()
    for start in range(1, actions + 1, BATCH):
        ids = range(start, min(start + BATCH, actions + 1))
        rows = [{"id": i, "agent": f"agent-{i % 7}", "seq": i, "ticket": f"T-{i // 3}",
                 "payload": '{"text": "' + "x" * 160 + '"}', "decision": '{"ok": true}', "dhash": f"h{i}",
                 "status": "done", "root": i - i % 3, "parent": i - 1 if i % 3 else None,
                 "read_keys": [f"k{i - 1}"] if i > 1 else [], "recorded_at": now, "incident": None,
                 "snap": None, "rstart": None, "contained": False} for i in ids]
        graph.query(queries.CREATE_ACTIONS, {"rows": rows})
        graph.query(queries.CREATE_FACTS, {"rows": [
            {"writer": i, "id": i, "key": f"k{i}", "value": f"v{i}", "version": 1, "seq": i, "valid_from": now,
             "valid_until": None, "known_at": now, "system_at": now, "contained": False} for i in ids]})
        reads = [{"reader": i, "fact": i - 1, "writer": i - 1} for i in ids if i > 1]
        graph.query(queries.CREATE_READS, {"rows": reads})
        graph.query(queries.CREATE_FEEDS, {"rows": reads})
    seconds = time.perf_counter() - t0
    info = redis.Redis.from_url(url).info("persistence")
    return seconds, int(info.get("aof_rewrites", 0))


def _wait_rewrite_done(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    while True:
        info = client.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        time.sleep(0.2)


def _kill_and_restart(proc, data_dir: Path, port: int, actions: int) -> tuple[dict, object]:
    from falkordb import FalkorDB

    from core import embedded

    time.sleep(1.5)  # appendfsync everysec: what was written is in the file
    sizes = aof_sizes(data_dir)
    proc.kill()
    proc.wait(timeout=30)
    t0 = time.perf_counter()
    proc = embedded.start_redis_server(data_dir=data_dir, port=port, with_graph=True, die_with_parent=True)
    seconds = time.perf_counter() - t0
    common._procs.append(proc)
    held = FalkorDB.from_url(embedded.server_url(port), socket_timeout=600).select_graph(GRAPH).ro_query(
        "MATCH (a:Action) RETURN count(a)").result_set[0][0]
    if held != actions:
        raise RuntimeError(f"the restarted server holds {held} actions of {actions}")
    return {**sizes, "restart_s": seconds, "actions_held": held}, proc


def run(quick: bool, actions: int | None = None) -> dict:
    from core import embedded

    actions = actions or SIZES["quick" if quick else "full"]
    os.environ["KINTSUGI_STORE_START_WAIT_SECONDS"] = "1800"  # the start waits the whole load out
    tmp = Path(tempfile.mkdtemp(prefix="kintsugi-restart-"))
    data_dir, port = tmp / "falkordb", common._free_port()
    proc = embedded.start_redis_server(data_dir=data_dir, port=port, with_graph=True, die_with_parent=True)
    common._procs.append(proc)
    url = embedded.server_url(port)
    try:
        record_s, rewrites = record(url, actions)
        common.log(f"restart: {actions} actions recorded in {record_s:.1f}s ({rewrites} rewrites)")
        as_left, proc = _kill_and_restart(proc, data_dir, port, actions)
        import redis

        redis.Redis.from_url(url).bgrewriteaof()
        _wait_rewrite_done(url)
        rewritten, proc = _kill_and_restart(proc, data_dir, port, actions)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"actions": actions, "record_s": record_s, "rewrites_while_recording": rewrites,
           "as_recording_left_it": as_left, "right_after_a_rewrite": rewritten, "load_avg_end": common.load_avg()}
    common.table(f"restart: the embedded FalkorDB killed after {actions:,} recorded actions and started again",
                 ["append-only file at the kill", "incremental MB", "base MB", "restart s"],
                 [["as the recording left it", as_left["incremental_mb"], as_left["base_mb"], as_left["restart_s"]],
                  ["right after a rewrite", rewritten["incremental_mb"], rewritten["base_mb"],
                   rewritten["restart_s"]]],
                 [f"recorded in {record_s:.1f}s as the recorder writes (batches of {BATCH}), {rewrites} rewrites "
                  f"while recording; every restart held all {actions:,} actions; load average "
                  f"{out['load_avg_end']}"])
    return out
