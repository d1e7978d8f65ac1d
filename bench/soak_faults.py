"""The faults `bench soak --faults` adds to the four of its classic schedule (bench/soak.py), and what the
soak needs to strike and measure them:

- kill_broker: the broker killed (SIGKILL) mid-repair and started again by the supervision the demo runs
  (kintsugi_site.supervise.SupervisedStore, polled here every half second); the web server and the worker
  must stay up.
- kill_falkordb: the append-only file grown first (bench/restart.py's recorder-shaped writes into a ballast
  graph of its own), then FalkorDB killed (SIGKILL) mid-repair and started again by the supervision, which
  waits its load out; meanwhile the server is `starting` to everyone (LOADING), and the repair blocks and
  resumes to repaired.
- freeze_postgres: every server process of the soak's database frozen (SIGSTOP, those opened during the
  freeze too) for some seconds, then resumed (SIGCONT). The machine's Postgres serves other databases: its
  postmaster and their processes are left alone, so to the soak's processes the database is frozen.
- agent_down: a workspace recorded by a remote agent (a replay endpoint the bench serves), flagged while
  that endpoint is down for minutes (seconds under --quick): the incident goes through its outage
  schedule (blocked, retried, `needs_attention` once KINTSUGI_REPLAY_OUTAGE_SECONDS is spent) and ends
  repaired once the endpoint answers again (the sweep tries it again).

ReadyProbe asks /readyz every half second all along: a fault's time to healthy is from its strike to the
first green answer after it ended.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import common

NEW_FAULTS = ("kill_broker", "kill_falkordb", "freeze_postgres", "agent_down")
LABELS = {"kill_broker": "broker killed (SIGKILL), restarted by the supervision",
          "kill_falkordb": "FalkorDB killed (SIGKILL) with a grown append-only file, restarted by the supervision",
          "freeze_postgres": "Postgres frozen (SIGSTOP of the database's processes)",
          "agent_down": "remote agent's replay endpoint down"}
# Seconds a fault lasts where the bench decides it (the kills last as long as the restart takes).
SECONDS = {"freeze_postgres": {"quick": 6.0, "full": 20.0}, "agent_down": {"quick": 20.0, "full": 180.0}}
# Actions written into the ballast graph before FalkorDB is killed (under the 4 MB the server rewrites at).
BALLAST_ACTIONS = {"quick": 1_500, "full": 4_000}
# The remote agent's outage schedule on the soak's server: needs attention after this long unreachable.
REPLAY_OUTAGE_SECONDS = {"quick": 3, "full": 60}
REMOTE_SOURCE = "kb/page"


# --- /readyz, all along ------------------------------------------------------------------------------------
class ReadyProbe:
    def __init__(self, base: str):
        self.url = base + "/readyz"
        self.samples: list[tuple[float, int, dict]] = []  # (wall time, status or 0, states of the checks)

    async def run(self, http, stop: asyncio.Event) -> None:
        while not stop.is_set():
            at = time.time()
            try:
                r = await http.get(self.url, timeout=5)
                states = {k: v.get("state") for k, v in r.json().get("checks", {}).items()}
                self.samples.append((at, r.status_code, states))
            except Exception:  # noqa: BLE001 - no answer is a sample too
                self.samples.append((at, 0, {}))
            await asyncio.sleep(0.5)

    def healthy_after(self, began: float, ended: float) -> float | None:
        """Seconds from `began` to the first green answer asked at or after `ended`."""
        return next((at - began for at, status, _ in self.samples if at >= ended and status == 200), None)

    def red_between(self, began: float, ended: float) -> dict:
        """Which checks /readyz named not ok while the fault lasted, with how many answers said so."""
        seen: dict[str, int] = {}
        for at, status, states in self.samples:
            if began <= at <= ended + 1:
                if not status:
                    seen["no answer"] = seen.get("no answer", 0) + 1
                for name, state in states.items():
                    if state not in ("ok", None) and not name.startswith("sweep"):
                        seen[f"{name}: {state}"] = seen.get(f"{name}: {state}", 0) + 1
        return seen


# --- the kills, restarted by the supervision ---------------------------------------------------------------
async def kill_and_supervise(store, name: str) -> dict:
    """SIGKILL the store's server and poll a SupervisedStore for it until the server answers again."""
    from core import embedded
    from kintsugi_site.supervise import SupervisedStore

    sup = SupervisedStore(name, alive=lambda: embedded._port_held(store.port), ensure=store.start, backoff=1.0)
    store.proc.kill()
    await asyncio.to_thread(store.proc.wait, 10)
    killed = time.time()
    said = []
    while True:
        news = await asyncio.to_thread(sup.check)
        if news:
            said.append(f"{time.time() - killed:.1f}s {news}")
        if sup.restarts and await asyncio.to_thread(embedded._port_answers, store.port):
            break
        await asyncio.sleep(0.5)
    return {"supervision": said, "restarts": sup.restarts, "back_after_s": time.time() - killed}


def grow_aof(store, mode: str) -> dict:
    from bench import restart

    seconds, rewrites = restart.record(common.FALKORDB_URL, BALLAST_ACTIONS[mode], graph_name="soak-ballast")
    time.sleep(1.2)  # appendfsync everysec: the ballast is in the file before the kill
    return {"ballast_actions": BALLAST_ACTIONS[mode], "ballast_s": seconds, **restart.aof_sizes(store.data_dir)}


# --- Postgres frozen ---------------------------------------------------------------------------------------
class PostgresFreeze:
    """SIGSTOP every server process of the soak's database (and those that open while it lasts); SIGCONT
    them all at the end. Its own connection, which finds them, is the one it leaves running."""

    def __init__(self):
        import psycopg

        self.conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
        self.frozen: set[int] = set()

    def freeze_new(self) -> None:
        rows = self.conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND pid <> pg_backend_pid()").fetchall()
        for (pid,) in rows:
            if pid not in self.frozen:
                try:
                    os.kill(pid, signal.SIGSTOP)
                    self.frozen.add(pid)
                except ProcessLookupError:
                    pass

    def thaw(self) -> None:
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.conn.close()


async def freeze_postgres(seconds: float) -> dict:
    freeze = await asyncio.to_thread(PostgresFreeze)
    until = time.monotonic() + seconds
    try:
        while time.monotonic() < until:
            await asyncio.to_thread(freeze.freeze_new)
            await asyncio.sleep(0.2)
    finally:
        await asyncio.to_thread(freeze.thaw)
    return {"processes_frozen": len(freeze.frozen)}


# --- the remote agent --------------------------------------------------------------------------------------
def _callback(request: dict, op: str, body: dict) -> None:
    req = urllib.request.Request(f"{request['base_url']}/api/v1/recording/actions/{request['action']}/{op}/",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {request['token']}",
                                          "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as response:
        response.read()


class RemoteAgent:
    """The replay endpoint of the remote workspace's two agents: the writer ingests the page (which a
    repair answers with None) and writes nothing; the reader reads the policy and decides. `down()` closes
    the port (connections refused), `up()` serves it again on the same address."""

    def __init__(self):
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                agent.requests.append((time.time(), request["agent"], request.get("purpose")))
                agent.replay(request)  # its calls back, then the answer (as tests/agents' endpoints do)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.handler = Handler
        self.requests: list[tuple[float, str, str]] = []
        self.errors: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/replay"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def replay(self, request: dict) -> None:
        try:
            if request["agent"] == "writer":
                _callback(request, "ingest", {"source": REMOTE_SOURCE})
                _callback(request, "finish", {"decision": {"wrote": False}})
            else:
                _callback(request, "get", {"key": "policy"})
                _callback(request, "finish", {"decision": {"days": 0}})
        except Exception as exc:  # noqa: BLE001 - the repair says what it missed; kept for the report
            self.errors.append(f"{request['agent']}: {exc!r}"[:200])

    def down(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def up(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def prepare_remote(run_id: str, admin, members: list, agent: RemoteAgent) -> dict:
    """A workspace whose writer ingests kb/page and writes the policy, and whose reader reads it, both
    recorded through the recording API by agents with `agent`'s replay endpoint."""
    from rest_framework.test import APIClient

    from provenance.models import Source, Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent
    from provenance.access.tenancy import OPERATOR_VIA

    ws = Workspace.objects.create(name=f"soak-{run_id}-remote")
    ws.members.add(*members)
    source = Source.objects.create(workspace=ws, source_id=REMOTE_SOURCE, content="refunds: 30 days")
    for name in ("writer", "reader"):
        register_agent(workspace=ws, name=name, replay=agent.url, timeout_seconds=2, actor=admin, reason="soak",
                       via=OPERATOR_VIA)
    _, key = issue_agent_token(workspace=ws, label="soak", actor=admin, reason="soak", via=OPERATOR_VIA)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def post(path: str, body: dict) -> dict:
        return api.post(f"/api/v1/recording/actions/{path}", body, format="json").json()

    a = post("", {"agent": "writer", "payload": {"source": REMOTE_SOURCE}})["action"]
    post(f"{a}/ingest/", {"source": REMOTE_SOURCE})
    post(f"{a}/set/", {"key": "policy", "value": "30 days"})
    post(f"{a}/finish/", {"decision": {"wrote": True}})
    b = post("", {"agent": "reader", "payload": {"ticket": "t1"}})["action"]
    post(f"{b}/get/", {"key": "policy"})
    if not post(f"{b}/finish/", {"decision": {"days": 30}}).get("committed"):
        raise RuntimeError("the remote workspace's recording did not commit")
    return {"workspace": ws.name, "source": source.pk, "remote": True}
