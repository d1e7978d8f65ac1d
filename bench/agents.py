"""Benchmark: recording over HTTP (the recording protocol, through the production web server) against
recording in-process, the same agents and the same calls, in the same run on the same machine.

Each root action is a writer (2 sets, 1 handoff) handing off to a reader (2 gets, 1 effect): 8 recorder
ops as GraphRecorder.ops counts them, 10 HTTP requests (open, calls, finish, for each action).
- `in-process, one session`: GraphRecorder.run_root for every root, one flush at the end (a desk run);
- `in-process, record_root`: provenance.recording.services.record_root per root (a transaction, the workspace
  lock and a flush each: what the `record` command does per call);
- `HTTP protocol`: kintsugi_client against gunicorn with uvicorn workers on loopback, one client, each
  root staged until its reader finishes and then committed (also one transaction and flush per root);
  its connection kept open, beside the same client opening a connection per request (keep_alive=0), a
  root of each in turn.
Then the time to open a root with 0 and N earlier recordings in the workspace (bench.agents_open).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from bench import agents_clients, agents_concurrent, agents_open, agents_thinking, commit_costs, commit_write_forms, common
from core.db_roles import OWNER_ALIAS, split_roles

ROOTS = {"full": 200, "quick": 15}  # quick: the concurrent rows follow, and the run must stay short
OPS_PER_ROOT = 8
# What each path is asked to reach (docs/benchmarks.md), printed beside what it did.
TARGETS = {"in-process, record_root": "≥ 5,000 ops/s", ("per_call", 20): "≥ 1,000 ops/s",
           ("per_call", 100): "p95 ≤ 250 ms", ("batch", 20): "≥ 10,000 ops/s"}


def _desk_agents(prefix: str, *, remote: bool) -> dict:
    """The writer and reader under names of their own (in-process, or registered as remote)."""
    writer_name, reader_name = f"{prefix}_writer", f"{prefix}_reader"

    def writer(rec, p):
        rec.set(f"faq/{p['n']}", f"answer {p['n']}")
        rec.set("shared", p["n"])
        rec.handoff(reader_name, {"n": p["n"], "ticket": f"t{p['n']}"})
        return {"n": p["n"]}

    def reader(rec, p):
        rec.get(f"faq/{p['n']}")
        rec.get("shared")
        # Over the protocol a live effect names a desk ticket unless it says it is external; the bench
        # has no desk tickets.
        rec.effect("note", amount=0, ticket=p["ticket"], **({"external": True} if remote else {}))
        return {"read": True}

    return {writer_name: writer, reader_name: reader}


IN_PROCESS, REMOTE = _desk_agents("bench_local", remote=False), _desk_agents("bench_remote", remote=True)


def _agents() -> None:
    from provenance.agents import agent

    for name, fn in IN_PROCESS.items():
        agent(name)(fn)


def _http_desk(client):
    from kintsugi_client import Desk

    desk = Desk(client)
    for name, fn in REMOTE.items():
        desk.agent(name)(fn)
    return desk


SERVER_LOG = common.RESULTS_DIR / "agents-web.log"


def _server(port: int) -> subprocess.Popen:
    # A pool of Postgres connections per web worker: a hundred concurrent clients must not open a
    # hundred connections each (the machine's Postgres allows 100 in all).
    env = dict(os.environ, KINTSUGI_WEB_PORT=str(port), KINTSUGI_DB_POOL_MAX_SIZE=os.environ.get(
        "KINTSUGI_DB_POOL_MAX_SIZE", "8"))
    SERVER_LOG.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "kintsugi_site.asgi:application", "--worker-class",
                             "uvicorn_worker.UvicornWorker", "--workers", "2", "--bind", f"127.0.0.1:{port}",
                             "--no-control-socket"], cwd=common.ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(SERVER_LOG, "wb"), start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the web server did not start")


def _concurrent_keys(admin, count: int) -> list[str]:
    """One workspace per concurrent client (a recording token each), the bench's remote agents registered."""
    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent

    keys = []
    for i in range(count):
        # Kept from run to run (their graphs emptied): creating a hundred workspaces through the audited
        # services takes longer than the measurement; a token is issued afresh (keys are never stored).
        name = f"bench-http-c{i:03d}"
        ws, created = Workspace.objects.get_or_create(name=name)
        workspace_graph(name).delete()
        ws.recordings.all().delete()
        if created:
            for agent in REMOTE:
                register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                               reason="bench", via="cli")
        keys.append(issue_agent_token(workspace=ws, label="bench", actor=admin, reason="bench", via="cli")[1])
    return keys


def run(quick: bool, *, same_workspace: bool = False) -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from kintsugi_client import Client
    from provenance.graph.graph import workspace_graph
    from provenance.models import AgentToken, Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent
    from provenance.recording.recorder import GraphRecorder
    from provenance.recording.services import record_root

    _agents()
    roots = ROOTS["quick" if quick else "full"]
    admin, _ = get_user_model().objects.get_or_create(username="bench-agents", defaults={"is_superuser": True})
    names = {"session": "bench-inproc-session", "record_root": "bench-inproc-root", "http": "bench-http"}
    for name in names.values():
        # The application's role may not delete workspaces (core.db_roles): the owner clears the bench's.
        Workspace.objects.using(OWNER_ALIAS if split_roles() else "default").filter(name=name).delete()
        workspace_graph(name).delete()
        Workspace.objects.create(name=name)
    http_ws = Workspace.objects.get(name=names["http"])
    for agent in [*REMOTE, *(a for names in agents_clients.AGENTS.values() for a in names)]:
        register_agent(workspace=http_ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                       reason="bench", via="cli")
    token, key = issue_agent_token(workspace=http_ws, label="bench", actor=admin, reason="bench", via="cli")

    rows, out = [], {"roots": roots, "ops": roots * OPS_PER_ROOT}
    t0, cpu0 = time.perf_counter(), time.process_time()
    session = GraphRecorder(graph=workspace_graph(names["session"]), workspace=names["session"], sources={},
                               effects="sandbox", load=False)
    for n in range(roots):
        session.run_root("bench_local_writer", {"n": n})
    session.flush()
    out["session_s"], out["session_cpu_s"] = time.perf_counter() - t0, time.process_time() - cpu0
    common.log(f"in-process session: {out['session_s']:.1f}s")
    assert session.ops == roots * OPS_PER_ROOT, session.ops

    t0, cpu0 = time.perf_counter(), time.process_time()
    for n in range(roots):
        record_root(workspace=names["record_root"], agent="bench_local_writer", payload={"n": n})
    out["record_root_s"], out["record_root_cpu_s"] = time.perf_counter() - t0, time.process_time() - cpu0
    common.log(f"record_root: {out['record_root_s']:.1f}s")

    out["open_root"] = agents_open.run(admin, quick)

    t0 = time.perf_counter()
    keys = [key] if same_workspace else _concurrent_keys(admin, max(agents_concurrent.CLIENTS))
    common.log(f"{len(keys)} workspaces for concurrent clients in {time.perf_counter() - t0:.1f}s")
    port = common._free_port()
    server = _server(port)
    server_cpu = lambda: common.children_cpu_seconds(server.pid)  # noqa: E731 - the gunicorn workers' CPU
    try:
        # Call by call, the connection kept open (`http_s`) beside a connection per request (`http_close_s`,
        # keep_alive=0: the client before it kept one), a root of each in turn so that both meet the same
        # load; then with the client's background batching (`http_batched_s`).
        url = f"http://127.0.0.1:{port}"
        pair = {"http_s": _http_desk(Client(url, key, buffer=0)),
                "http_close_s": _http_desk(Client(url, key, buffer=0, keep_alive=0))}
        for desk in pair.values():
            desk.run_root("bench_remote_writer", {"n": -1})  # warm the workers (imports, connections)
        for key_s in pair:
            out[key_s] = out[key_s.replace("_s", "_cpu_s")] = 0.0
        for n in range(roots):
            for offset, (key_s, desk) in zip((0, 2 * roots), pair.items()):
                t0, cpu0 = time.perf_counter(), server_cpu()
                desk.run_root("bench_remote_writer", {"n": n + offset})
                out[key_s] += time.perf_counter() - t0
                out[key_s.replace("_s", "_cpu_s")] += server_cpu() - cpu0
        desk = _http_desk(Client(url, key, buffer=64))
        t0, cpu0 = time.perf_counter(), server_cpu()
        for n in range(roots, 2 * roots):
            desk.run_root("bench_remote_writer", {"n": n})
        out["http_batched_s"], out["http_batched_cpu_s"] = time.perf_counter() - t0, server_cpu() - cpu0
        common.log(f"HTTP, one client: kept {out['http_s']:.1f}s, a connection per request {out['http_close_s']:.1f}s, "
                   f"batching {out['http_batched_s']:.1f}s")
        actions = workspace_graph(names["http"]).ro_query("MATCH (a:Action) RETURN count(a)")[0][0]
        assert actions == 2 * (3 * roots + 2), actions
        client_rows, client_notes, out["clients"] = agents_clients.run(
            base=f"http://127.0.0.1:{port}", key=key, roots=roots, ops_per_root=OPS_PER_ROOT,
            base_ops_per_s=roots * OPS_PER_ROOT / out["record_root_s"], server_cpu=server_cpu)
        out["concurrent"] = agents_concurrent.run(base=f"http://127.0.0.1:{port}", keys=keys,
                                                  writer="bench_remote_writer", reader="bench_remote_reader",
                                                  quick=quick, same_workspace=same_workspace,
                                                  server_cpu=server_cpu)
        graph = workspace_graph(names["http"])
        out["thinking"] = agents_thinking.run(
            base=f"http://127.0.0.1:{port}", key=key, writer="bench_remote_writer", reader="bench_remote_reader",
            count_roots=lambda: graph.ro_query("MATCH (a:Action {agent: $agent}) RETURN count(a)",
                                               {"agent": "bench_remote_writer"})[0][0])
    finally:
        server.terminate()
        server.wait(timeout=20)
    # Counted in this process, through the services the API calls, after the timings (its roots land in
    # the HTTP workspace the rows above counted).
    costs = commit_costs.per_root(AgentToken.objects.select_related("workspace").get(pk=token.pk),
                                  workspace=names["record_root"], writer="bench_remote_writer",
                                  reader="bench_remote_reader", local_writer="bench_local_writer",
                                  falkordb_url=settings.FALKORDB_URL)
    out["costs"] = {phase: {"statements": c.statements, "round_trips": c.round_trips} for phase, c in costs.items()}
    out["write_forms"] = commit_write_forms.run(quick)

    base = out["ops"] / out["record_root_s"]
    for label, key_s in (("in-process, one session", "session_s"), ("in-process, record_root", "record_root_s"),
                         ("HTTP protocol", "http_s"), ("HTTP protocol, a connection per request", "http_close_s"),
                         ("HTTP protocol, background batching", "http_batched_s")):
        ops_s = out["ops"] / out[key_s]
        out[key_s.replace("_s", "_ops_per_s")] = ops_s
        # In-process, the recording process is the server: its own CPU per op; over HTTP, the web workers'.
        rows.append([label, roots, out["ops"], out[key_s], ops_s, ops_s / base, TARGETS.get(label, ""),
                     out[key_s.replace("_s", "_cpu_s")] * 1000 / out["ops"]])
    rows += client_rows
    out["http_requests_per_s"] = roots * 10 / out["http_s"]
    common.table("recording over HTTP vs in-process (same agents, same run)",
                 ["path", "roots", "ops", "seconds", "ops/s", "x record_root", "target", "server CPU ms/op"], rows,
                 [f"HTTP: {out['http_requests_per_s']:.0f} requests/s (10 per root), one client, gunicorn with 2 "
                  f"uvicorn workers on loopback", "HTTP protocol is the Python client library (kintsugi_client.Desk) "
                  "with plain agent functions, call by call (Client(buffer=0)), its connection kept open; a "
                  "connection per request is the same client with keep_alive=0 (as it was before it kept one), a "
                  "root of each in turn; background batching holds set and "
                  "handoff back and sends them with the next call that needs an answer (7 requests per root); the "
                  "framework and TypeScript rows run the same writer and reader through their integrations and "
                  "in Node, each call by call and batching; set+get roots are one action that sets a fact and "
                  "reads it back (2 ops)",
                  *client_notes, "server CPU ms/op: the web workers' CPU seconds over the row (/proc/<pid>/stat of "
                  "gunicorn's workers) per op; in-process rows: the recording process's own CPU per op",
                  f"load average {common.load_avg()}"])
    base = {r["mode"]: r["ops_per_s"] for r in out["concurrent"] if r["clients"] == 1}
    common.table(f"concurrent recording over HTTP ({'one workspace' if same_workspace else 'a workspace per client'})",
                 ["mode", "clients", "ops", "ops/s", "x 1 client", "x record_root", "requests/s", "p50 ms", "p95 ms",
                  "409s", "target", "server CPU ms/op"],
                 [[r["mode"], r["clients"], r["ops"], r["ops_per_s"], r["ops_per_s"] / base[r["mode"]],
                   r["ops_per_s"] / out["record_root_ops_per_s"], r["requests_per_s"], r["p50_ms"], r["p95_ms"],
                   r["conflicts"], TARGETS.get((r["mode"], r["clients"]), ""), r.get("server_cpu_ms_per_op")]
                  for r in out["concurrent"]],
                 [f"per_call: 10 requests per root (8 ops); batch: {agents_concurrent.BATCH_ROOTS} roots per request; "
                  f"a {agents_concurrent.WINDOW_S['quick' if quick else 'full']}s window per row",
                  "clients are asyncio tasks in the bench process, sharing the machine with the server",
                  f"load average {common.load_avg()}"])
    common.table(f"{agents_thinking.AGENTS} agents of one workspace, each thinking {agents_thinking.THINK_S:g} s "
                 "inside its action",
                 ["mode", "agents", "all committed s", "one agent alone s", "x alone", "committed", "409s"],
                 [[r["mode"], r["agents"], r["seconds"], r["alone_s"], r["x_alone"], r.get("committed"), r["conflicts"]]
                  for r in out["thinking"]],
                 ["per_call: a request per call; calls: open, one read, the thinking, then the rest in one "
                  "POST …/actions/{id}/calls/ per action", "target: all committed within 2 s"])
    agents_open.report(out["open_root"])
    common.table("what one root costs, phase by phase (the root of the rows above, counted in-process)",
                 ["phase", "Postgres statements", "FalkorDB round trips"], commit_costs.report(costs),
                 ["open, staged call: the most any of a root's two opens and six staged calls cost; HTTP root: all "
                  "ten calls; counted through the services the API calls, without the entrance's own (its token's "
                  "look-up)", "a round trip: one send to FalkorDB (a pipeline or a script is one)"])
    return out
