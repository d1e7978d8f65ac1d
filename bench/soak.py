"""`python -m bench soak [--minutes M] [--quick] [--faults F,...]`: an always-on desk on a bad day, bounded.
The production web server (gunicorn with 2 uvicorn workers), one Celery worker and the beat in a process of its own run
on loopback against the bench's own FalkorDB and broker (core.embedded) and the machine's Postgres, for
M minutes (default 10; --quick: one).

All along, agent clients record over HTTP: half call by call (open, the calls, finish: the last finish
commits the recording), half whole recordings in batches. Each root carries an id of its own, and the
client keeps a ledger of the roots the server said it committed. The first minute (a sixth of a shorter
run) is the baseline: the same recording load, nothing else. Then, on a schedule:
- flags of the poisoned page of small desks (the canonical desk, one workspace each) through the API,
  each starting a repair on the worker while recording goes on;
- approvals of the drafted items of repaired incidents through the API (a reviewer, not the flagger);
- dependency faults: FalkorDB frozen (SIGSTOP: it holds its port and never answers) and resumed, FalkorDB
  stopped (SIGTERM) and started again on its port and data, the broker frozen, the broker stopped and
  started again. A desk is flagged just before each fault, so a repair is under way when it strikes.
  `--faults` picks them, in order, among these four and four more (bench/soak_faults.py): the broker and
  FalkorDB (its append-only file grown first) killed and started again by the supervision, the database's
  processes frozen, a remote agent's replay endpoint down. The classic four alone keep the schedule below;
  any other selection gets a slot each (schedule()). Default: all eight, the classic four under --quick.
A client whose request was refused (4xx, 5xx: the server answered) records the same root again; one
whose request went unanswered at the commit point (the connection dropped or timed out) cannot know,
so that root is set aside as `unknown` and the client goes on with a new one.

At the deadline the clients stop; the run then waits (at most the drain limit) for every incident to
end and every approval to execute, and checks: every root the ledger holds is in the graph exactly once
(0 lost, 0 duplicated; its writer and its reader), each recording workspace's action count in Postgres
equals its graph's, every incident `repaired`, every approved item executed. The table gives per
endpoint the count, p50 / p95 / p99 ms and errors in the baseline and over the whole soak, and for each
fault the time from its end to the affected incidents `repaired` (an incident is affected when it was
open at any moment of the fault), from its strike to the first green /readyz after its end and to the
affected incidents `repaired`, and the roots lost or doubled among those committed around it. Recording
goes to workspaces of their own, not the flagged desks: a repair's verification replays the roots of its
desk, and the recording workspaces' agents have no replay server (the remote agent of `agent_down` has
one, served by the bench). Everything the run starts is stopped at the end (try/finally, SIGTERM too).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench import common, soak_faults
from core.vocabulary import IncidentStatus, ItemStatus

WRITER, READER = "soak_writer", "soak_reader"
CLIENTS = {"per_call": 2, "batch": 2}
BATCH_ROOTS = 5
PAUSE_S = {"per_call": 0.05, "batch": 0.5}  # between roots / batches: a steady load, not a saturating one
REQUEST_TIMEOUT_S = 30.0
DRAIN_S = {"quick": 120.0, "full": 240.0}
DESKS = 5
# Tickets per flagged desk (None: the canonical desk): big enough in a full run that a repair lasts a few
# seconds; each fault strikes FAULT_AFTER_FLAG_S after its desk's flag was answered, the repair under way.
DESK_TICKETS = {"quick": None, "full": 600}
FAULT_AFTER_FLAG_S = 0.5
# Where the worker is told to hold a repair (repairs.faults.fault_point "pause:walked") so that a new
# fault strikes a repair in progress: on a quiet machine a soak desk's repair is done before a fixed delay.
HOLD_FILE: Path | None = None
APPROVALS_PER_DESK = 15
WARMUP_S = 3.0
# The server's deadlines and the healer's pace, shortened so that faults of a minute heal within it.
SERVER_ENV = {"KINTSUGI_SWEEP_SECONDS": "5", "KINTSUGI_RETRY_BACKOFF_SECONDS": "1",
              "KINTSUGI_RETRY_BACKOFF_MAX_SECONDS": "10", "KINTSUGI_FALKORDB_TIMEOUT_SECONDS": "5",
              "KINTSUGI_BROKER_TIMEOUT_SECONDS": "2", "KINTSUGI_DB_POOL_MAX_SIZE": "8"}

# (at, kind, argument) with `at` a fraction of the run after the baseline. A flag's and an approval's
# argument is the desk; a fault's is (the desk flagged just before it, its length as a fraction of the
# run). Faults never overlap.
SCHEDULE = [
    (0.20, "freeze_falkordb", (0, 0.12)),
    (0.38, "stop_falkordb", (1, 0.08)),
    (0.50, "approve", 0), (0.52, "freeze_broker", (4, 0.08)), (0.56, "approve", 1),  # approvals meet the freeze
    (0.66, "stop_broker", (2, 0.06)),
    (0.76, "flag", 3),  # a repair with no fault: the control for the fault rows
    (0.84, "approve", 2), (0.86, "approve", 4), (0.88, "approve", 3),
]
FAULT_LABELS = {"freeze_falkordb": "FalkorDB frozen (SIGSTOP)", "stop_falkordb": "FalkorDB stopped, started again",
                "freeze_broker": "broker frozen (SIGSTOP)", "stop_broker": "broker stopped, started again",
                **soak_faults.LABELS}
CLASSIC = ("freeze_falkordb", "stop_falkordb", "freeze_broker", "stop_broker")
FAULTS = CLASSIC + soak_faults.NEW_FAULTS
# A fault's share of a generated schedule: the killed FalkorDB's load and the agent's outage take longer.
SLOT_WEIGHT = {"kill_falkordb": 2, "agent_down": 3}
# Roots committed from a fault's strike to this long after its end count as that fault's in its row.
FAULT_LEDGER_AFTER_S = 30.0


def schedule(faults: tuple[str, ...]) -> tuple[list, int]:
    """The schedule for `faults` and how many desks it flags. The classic four alone keep SCHEDULE; any
    other selection gets a slot each (in the order given, sized by SLOT_WEIGHT): its desk's flag and the
    fault at the slot's start, lasting at most 60 % of the slot (90 % for the remote agent's outage; a
    classic fault its SCHEDULE length if shorter), the desk's approvals at 70 %; then a control flag."""
    if tuple(faults) == CLASSIC:
        return SCHEDULE, DESKS
    classic_length = {kind: arg[1] for _, kind, arg in SCHEDULE if kind in CLASSIC}
    unit, at, rows = 0.9 / sum(SLOT_WEIGHT.get(kind, 1) for kind in faults), 0.02, []
    for i, kind in enumerate(faults):
        slot = unit * SLOT_WEIGHT.get(kind, 1)
        share = 0.9 if kind == "agent_down" else 0.6
        rows.append((at, kind, (i, min(classic_length.get(kind, 1.0), share * slot))))
        rows.append((at + 0.7 * slot, "approve", i))
        at += slot
    rows.append((0.93, "flag", len(faults)))
    return sorted(rows, key=lambda row: row[0]), len(faults) + 1


# --- the stack ---------------------------------------------------------------------------------------------
class Stack:
    """The processes of one run: web, worker, beat (started here) and the bench's FalkorDB and broker
    (started by common.setup, stopped and restarted here by the faults)."""

    def __init__(self, tmp: Path):
        global HOLD_FILE
        self.tmp, self.procs = tmp, {}
        self.port = common._free_port()
        HOLD_FILE = tmp / "hold-the-repair"

    def env(self) -> dict:
        return dict(os.environ, **SERVER_ENV, KINTSUGI_WEB_PORT=str(self.port),
                    KINTSUGI_BEAT_SCHEDULE_FILE=str(self.tmp / "celerybeat-schedule"),
                    KINTSUGI_FAULT_FILE=str(HOLD_FILE))

    def start(self) -> None:
        from kintsugi_site.demo import web_server_command

        py = sys.executable
        celery = [py, "-m", "celery", "-A", "kintsugi_site"]
        self._spawn("web", web_server_command(py, bind=f"127.0.0.1:{self.port}", workers=2))
        self._spawn("worker", celery + ["worker", "-l", "warning", "-c", "1", "-n", "soak@%h", "--without-gossip",
                                        "--without-mingle"])
        self._spawn("beat", celery + ["beat", "-l", "warning", "-s", str(self.tmp / "celerybeat-schedule")])
        common.wait_until_healthy(self.base, self.procs, self.log_tail, timeout=90)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(cmd, cwd=common.ROOT, env=self.env(), stdout=log, stderr=log,
                                            start_new_session=True)

    def log_tail(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


class Store:
    """One of common.setup's redis-servers (index 0: FalkorDB, 1: the broker), frozen or restarted in place."""

    def __init__(self, index: int, *, graph: bool, url: str):
        from urllib.parse import urlsplit

        self.index, self.graph = index, graph
        self.port = urlsplit(url).port
        self.data_dir = common._dirs[0] / ("falkordb" if graph else "broker")

    @property
    def proc(self) -> subprocess.Popen:
        return common._procs[self.index]

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.proc.terminate()  # a clean shutdown: the AOF is flushed, as a deployment's stop would
        self.proc.wait(timeout=30)

    def start(self) -> None:
        from core import embedded

        proc = embedded.start_redis_server(data_dir=self.data_dir, port=self.port, with_graph=self.graph)
        if proc is None:
            raise RuntimeError(f"port {self.port} was taken while its server was stopped")
        common._procs[self.index] = proc
        if self.graph:
            import redis

            redis.Redis.from_url(common.FALKORDB_URL).config_set("save", "")


# --- the data ----------------------------------------------------------------------------------------------
def _prepare(run_id: str, clients: int, tickets: int | None, desks_n: int = DESKS,
             remote: dict[int, soak_faults.RemoteAgent] | None = None) -> dict:
    """Desks to flag, recording workspaces with their tokens, a lead and a reviewer with API tokens."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Source, Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent
    from provenance.recording.services import desk_run
    from provenance.access.tenancy import OPERATOR_VIA
    from provenance.access.tokens import issue_api_token

    ensure_roles()
    users = get_user_model()
    admin = users.objects.create_superuser(f"soak-admin-{run_id}", f"soak-{run_id}@example.com", None)
    people = {}
    for role, label in ((SUPPORT_LEAD, "lead"), (REVIEWER, "reviewer")):
        user = users.objects.create_user(f"soak-{label}-{run_id}", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        people[label] = (user, issue_api_token(user=user, actor=admin, reason="soak", via=OPERATOR_VIA)[1])
    desks = []
    for i in range(desks_n):
        if remote and i in remote:  # a workspace of a remote agent, for its outage
            desks.append(soak_faults.prepare_remote(run_id, admin, [people["lead"][0], people["reviewer"][0]],
                                                    remote[i]))
            continue
        name = f"soak-{run_id}-desk-{i}"
        desk_run(workspace=name, tickets=tickets, reason="soak")
        ws = Workspace.objects.get(name=name)
        ws.members.add(people["lead"][0], people["reviewer"][0])
        desks.append({"workspace": name, "source": Source.objects.get(workspace=ws, source_id=POISONED_PAGE).pk})
    recording = []
    for i in range(clients):
        ws = Workspace.objects.create(name=f"soak-{run_id}-rec-{i}")
        for agent in (WRITER, READER):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="soak", via=OPERATOR_VIA)
        recording.append({"workspace": ws.name, "key": issue_agent_token(workspace=ws, label="soak", actor=admin,
                                                                         reason="soak", via=OPERATOR_VIA)[1]})
    return {"desks": desks, "recording": recording, "lead": people["lead"][1], "reviewer": people["reviewer"][1]}


# --- the clients -------------------------------------------------------------------------------------------
class Samples:
    """(seconds since the start, endpoint, latency s, HTTP status or 0 for no answer) of every request."""

    def __init__(self, t0: float):
        self.t0, self.rows, self.wall0 = t0, [], time.time()
        self.no_retry_after = 0  # 503s without Retry-After (the error shape promises one)
        self.unanswered = Counter()  # (endpoint, exception) of requests that got no answer

    def add(self, endpoint: str, started: float, status: int) -> None:
        self.rows.append((started - self.t0, endpoint, time.monotonic() - started, status))


class Answered(Exception):
    """The server answered with an error: what it was asked was not done (so the root is recorded again)."""

    def __init__(self, status: int, body: str, retry_after: float):
        super().__init__(f"{status} {body[:200]}")
        self.status, self.retry_after = status, retry_after


class Unanswered(Exception):
    """No answer (connection dropped, timed out): the client cannot know whether it was done."""


async def _post(http, samples: Samples, endpoint: str, url: str, body: dict, key: str) -> dict:
    import httpx

    started = time.monotonic()
    try:
        response = await http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as exc:
        samples.add(endpoint, started, 0)
        samples.unanswered[f"{endpoint}: {type(exc).__name__} after {time.monotonic() - started:.0f}s"] += 1
        raise Unanswered(f"{endpoint}: {type(exc).__name__}") from exc
    samples.add(endpoint, started, response.status_code)
    if response.status_code == 503 and "Retry-After" not in response.headers:
        samples.no_retry_after += 1
    if response.status_code >= 400:
        try:
            retry_after = float(response.headers.get("Retry-After") or 1)
        except ValueError:
            retry_after = 1.0
        raise Answered(response.status_code, response.text, min(retry_after, 5.0))
    return response.json()


class Recorder:
    """One agent client: records roots into its workspace until `stop`, keeping the ledger."""

    def __init__(self, no: int, mode: str, base: str, key: str, samples: Samples):
        self.no, self.mode, self.key, self.samples = no, mode, key, samples
        self.url = base + "/api/v1/recording"
        self.n = 0
        self.committed: list[str] = []
        self.committed_at: dict[str, float] = {}  # wall time the server said so
        self.unknown: list[str] = []
        self.refused = Counter()

    def _rid(self) -> str:
        self.n += 1
        return f"c{self.no}-{self.n}"

    async def _per_call(self, http, rid: str) -> None:
        post = _post
        a = (await post(http, self.samples, "open", self.url + "/actions/", {"agent": WRITER, "payload": {"soak": rid}},
                        self.key))["action"]
        try:
            await post(http, self.samples, "call (set)", f"{self.url}/actions/{a}/set/",
                       {"key": f"soak/{rid}", "value": rid}, self.key)
            await post(http, self.samples, "call (handoff)", f"{self.url}/actions/{a}/handoff/",
                       {"agent": READER, "payload": {"soak": rid}}, self.key)
            await post(http, self.samples, "finish", f"{self.url}/actions/{a}/finish/", {"decision": {"soak": rid}},
                       self.key)
            b = (await post(http, self.samples, "open", self.url + "/actions/", {"agent": READER, "parent": a},
                            self.key))["action"]
            await post(http, self.samples, "call (get)", f"{self.url}/actions/{b}/get/", {"key": f"soak/{rid}"},
                       self.key)
            await post(http, self.samples, "call (effect)", f"{self.url}/actions/{b}/effect/",
                       {"kind": "note", "amount": 0, "ticket": rid, "external": True, "idempotency_key": rid},
                       self.key)
        except (Answered, Unanswered) as exc:
            # Nothing of it is committed before its last finish: abandon it (best effort; an idle one
            # expires) and record the root again.
            try:
                await post(http, self.samples, "abandon", f"{self.url}/actions/{a}/abandon/",
                           {"reason": "soak: a call was refused"}, self.key)
            except (Answered, Unanswered):
                pass
            status = exc.status if isinstance(exc, Answered) else 0  # 0: unanswered before the commit
            raise Answered(status, "refused before the commit", getattr(exc, "retry_after", 1.0)) from exc
        done = await post(http, self.samples, "finish (commit)", f"{self.url}/actions/{b}/finish/",
                          {"decision": {"read": True}}, self.key)
        if not done.get("committed"):
            raise RuntimeError(f"the reader's finish did not commit: {done}")

    def _batch_body(self, rids: list[str]) -> dict:
        actions = []
        for rid in rids:
            actions += [{"agent": WRITER, "payload": {"soak": rid}, "parent": None,
                         "calls": [{"op": "set", "key": f"soak/{rid}", "value": rid},
                                   {"op": "handoff", "agent": READER, "payload": {"soak": rid}},
                                   {"op": "finish", "decision": {"soak": rid}}]},
                        {"agent": READER, "parent": len(actions),
                         "calls": [{"op": "get", "key": f"soak/{rid}"},
                                   {"op": "effect", "kind": "note", "amount": 0, "ticket": rid, "external": True,
                                    "idempotency_key": rid},
                                   {"op": "finish", "decision": {"read": True}}]}]
        return {"actions": actions}

    async def run(self, http, stop: asyncio.Event) -> None:
        rids: list[str] = []
        while not stop.is_set():
            rids = rids or ([self._rid()] if self.mode == "per_call" else [self._rid() for _ in range(BATCH_ROOTS)])
            try:
                if self.mode == "per_call":
                    await self._per_call(http, rids[0])
                else:
                    await _post(http, self.samples, "batch", self.url + "/batch/", self._batch_body(rids), self.key)
            except Answered as exc:
                self.refused[exc.status] += 1
                await _sleep(stop, exc.retry_after)
                continue  # the same roots again
            except Unanswered:
                self.unknown += rids
                rids = []
                await _sleep(stop, 1.0)
                continue
            self.committed += rids
            self.committed_at.update(dict.fromkeys(rids, time.time()))
            rids = []
            await _sleep(stop, PAUSE_S[self.mode])


async def _held(path: Path, limit: float) -> float | None:
    """Seconds until the worker says it holds the repair (None: it never did within `limit`; the fault
    then strikes whatever is running, and its row says no incident was open)."""
    start = time.time()
    while time.time() - start < limit:
        if path.exists() and path.read_text().startswith("paused:"):
            return time.time() - start
        await asyncio.sleep(0.05)
    return None


async def _release(path: Path, after: float) -> None:
    await asyncio.sleep(after)
    path.unlink(missing_ok=True)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


# --- the schedule ------------------------------------------------------------------------------------------
class Operator:
    """Flags, approvals and faults, at their times; what happened when, for the report."""

    def __init__(self, base: str, data: dict, samples: Samples, falkordb: Store, broker: Store, mode: str = "quick",
                 agent: soak_faults.RemoteAgent | None = None):
        self.base, self.data, self.samples = base, data, samples
        self.mode, self.agent = mode, agent
        self.stores = {"falkordb": falkordb, "broker": broker}
        self.flags: list[dict] = []
        self.faults: list[dict] = []
        self.approvals: list[dict] = []
        self.notes: list[str] = []
        self.tasks: list[asyncio.Task] = []

    async def flag(self, http, desk: int) -> None:
        d = self.data["desks"][desk]
        at = time.time()
        url = f"{self.base}/api/v1/sources/{d['source']}/flag/"
        for _ in range(20):  # refused while a dependency is away: the operator tries again
            try:
                incident = await _post(http, self.samples, "flag", url, {"reason": "soak: poisoned page"},
                                       self.data["lead"])
                self.flags.append({"desk": desk, "workspace": d["workspace"], "incident": incident["id"], "at": at})
                return
            except (Answered, Unanswered) as exc:
                self.notes.append(f"flag desk {desk}: {exc}")
                await asyncio.sleep(3)
        self.notes.append(f"flag desk {desk}: gave up")

    async def approve(self, http, desk: int, wait_s: float) -> None:
        """Once the desk's incident is repaired, approve its first APPROVALS_PER_DESK pending items."""
        import httpx

        deadline = time.monotonic() + wait_s
        headers = {"Authorization": f"Bearer {self.data['reviewer']}"}
        while time.monotonic() < deadline:
            flag = next((f for f in self.flags if f["desk"] == desk), None)
            if flag is not None:
                started = time.monotonic()
                try:
                    r = await http.get(f"{self.base}/api/v1/incidents/{flag['incident']}/", headers=headers)
                    self.samples.add("incident (GET)", started, r.status_code)
                    if r.status_code == 200 and r.json()["status"] == IncidentStatus.REPAIRED:
                        break
                except httpx.HTTPError as exc:
                    self.samples.add("incident (GET)", started, 0)
                    self.samples.unanswered[f"incident (GET): {type(exc).__name__} after "
                                            f"{time.monotonic() - started:.0f}s"] += 1
            await asyncio.sleep(1)
        else:
            self.notes.append(f"approve desk {desk}: its incident was not repaired in {wait_s:.0f}s")
            return
        started = time.monotonic()
        r = await http.get(f"{self.base}/api/v1/review-items/", headers=headers,
                           params={"incident": flag["incident"], "status": ItemStatus.PENDING,
                                   "limit": APPROVALS_PER_DESK})
        self.samples.add("review items (GET)", started, r.status_code)
        for item in r.json()["results"]:
            for _ in range(10):
                try:
                    await _post(http, self.samples, "approve", f"{self.base}/api/v1/review-items/{item['id']}/approve/",
                                {"reason": "soak: approved"}, self.data["reviewer"])
                    self.approvals.append({"desk": desk, "item": item["id"], "at": time.time()})
                    break
                except (Answered, Unanswered) as exc:
                    self.notes.append(f"approve item {item['id']}: {exc}")
                    await asyncio.sleep(2)

    async def flag_then_fault(self, http, desk: int, kind: str, seconds: float) -> None:
        if kind in soak_faults.NEW_FAULTS:
            return await self.new_fault(http, desk, kind, seconds)
        await self.flag(http, desk)
        await asyncio.sleep(FAULT_AFTER_FLAG_S)
        await self.fault(kind, seconds)

    async def new_fault(self, http, desk: int, kind: str, seconds: float) -> None:
        """bench/soak_faults.py: a fault's own steps around its desk's flag; its length is its own (a kill
        lasts until the supervision has the store answering again), at most `seconds` where it is chosen."""
        extra: dict = {}
        if kind == "agent_down":  # down first: the repair meets the outage from its first replay
            seconds = min(seconds, soak_faults.SECONDS[kind][self.mode])
            began = time.time()
            await asyncio.to_thread(self.agent.down)
            common.log(f"soak: {FAULT_LABELS[kind]} for {seconds:.0f}s")
            try:
                await self.flag(http, desk)
                await asyncio.sleep(max(0.0, seconds - (time.time() - began)))
            finally:
                await asyncio.to_thread(self.agent.up)
        else:
            if kind == "kill_falkordb":
                extra = await asyncio.to_thread(soak_faults.grow_aof, self.stores["falkordb"], self.mode)
                common.log(f"soak: append-only file grown: {extra}")
            HOLD_FILE.write_text("pause:walked")  # the repair waits after its walk until the strike
            await self.flag(http, desk)
            extra["held_s"] = await _held(HOLD_FILE, limit=120.0)
            began = time.time()
            common.log(f"soak: {FAULT_LABELS[kind]}")
            release = asyncio.create_task(_release(HOLD_FILE, after=0.3))  # let it go into the fault
            if kind == "freeze_postgres":
                extra.update(await soak_faults.freeze_postgres(min(seconds, soak_faults.SECONDS[kind][self.mode])))
            else:
                name = "falkordb" if kind == "kill_falkordb" else "broker"
                extra.update(await soak_faults.kill_and_supervise(self.stores[name], name))
            await release
        ended = time.time()
        flagged = next((f["incident"] for f in self.flags if f["desk"] == desk), None)
        self.faults.append({"kind": kind, "label": FAULT_LABELS[kind], "began": began, "ended": ended,
                            "seconds": ended - began, "flagged": flagged, **extra})

    async def fault(self, kind: str, seconds: float) -> None:
        store = self.stores["falkordb" if kind.endswith("falkordb") else "broker"]
        began = time.time()
        stopping = kind.startswith("stop")
        try:
            await asyncio.to_thread(store.stop if stopping else store.freeze)
            common.log(f"soak: {FAULT_LABELS[kind]} for {seconds:.0f}s")
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(store.start if stopping else store.thaw)
            self.faults.append({"kind": kind, "label": FAULT_LABELS[kind], "began": began, "ended": time.time(),
                                "seconds": time.time() - began})


async def _soak(stack: Stack, data: dict, minutes: float, quick: bool, falkordb: Store, broker: Store,
                plan: list | None = None, agent: soak_faults.RemoteAgent | None = None) -> dict:
    import httpx

    total = minutes * 60
    baseline_s = 60.0 if total >= 300 else total / 6
    samples = Samples(time.monotonic())
    stop = asyncio.Event()
    clients = []
    for i, rec in enumerate(data["recording"]):
        mode = "per_call" if i < CLIENTS["per_call"] else "batch"
        clients.append(Recorder(i, mode, stack.base, rec["key"], samples))
    limits = httpx.Limits(max_connections=len(clients) + 8)
    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S) as http:
        runs = [asyncio.create_task(c.run(http, stop)) for c in clients]
        probe, probe_stop = soak_faults.ReadyProbe(stack.base), asyncio.Event()
        probing = asyncio.create_task(probe.run(http, probe_stop))
        # Warm the web workers (imports, connections) before the clock starts: the baseline measures
        # steady recording. The warm-up's roots stay in the ledger and are checked with the rest.
        await asyncio.sleep(WARMUP_S)
        t0 = samples.t0 = time.monotonic()
        samples.wall0 = time.time()
        samples.rows.clear()
        op = Operator(stack.base, data, samples, falkordb, broker, "quick" if quick else "full", agent)
        # The schedule after the baseline: its fractions of the rest of the run.
        rest = total - baseline_s
        for at, kind, arg in plan or SCHEDULE:
            when = baseline_s + at * rest
            await asyncio.sleep(max(0.0, when - (time.monotonic() - t0)))
            common.log(f"soak {time.monotonic() - t0:5.0f}s: {kind} {arg}")
            if kind == "flag":
                op.tasks.append(asyncio.create_task(op.flag(http, arg)))
            elif kind == "approve":
                op.tasks.append(asyncio.create_task(op.approve(http, arg, DRAIN_S["quick" if quick else "full"])))
            else:
                op.tasks.append(asyncio.create_task(op.flag_then_fault(http, arg[0], kind, arg[1] * rest)))
        await asyncio.sleep(max(0.0, total - (time.monotonic() - t0)))
        stop.set()
        common.log(f"soak {time.monotonic() - t0:5.0f}s: deadline; the clients stop, the operator's tasks drain")
        drain = DRAIN_S["quick" if quick else "full"]
        _, late = await asyncio.wait(runs, timeout=REQUEST_TIMEOUT_S * 3)
        for task in late:  # a root cut off here was never answered: it is in no ledger
            task.cancel()
            op.notes.append("a client outlived the deadline by 90 s and was stopped")
        done, pending = await asyncio.wait(op.tasks, timeout=drain)
        for task in pending:
            task.cancel()
            op.notes.append("an operator's task outlived the drain limit")
        for task in done:
            if task.exception() is not None:
                op.notes.append(f"an operator's task failed: {task.exception()!r}")
        # /readyz asked on until it is green after the last fault (at most a minute more).
        last_end = max((f["ended"] for f in op.faults), default=0.0)
        for _ in range(120):
            if probe.healthy_after(last_end, last_end) is not None:
                break
            await asyncio.sleep(0.5)
        probe_stop.set()
        await probing
    return {"samples": samples, "clients": clients, "operator": op, "baseline_s": baseline_s,
            "elapsed_s": time.monotonic() - t0, "probe": probe}


# --- the checks --------------------------------------------------------------------------------------------
def _wait_settled(incidents: list[int], items: list[int], limit: float) -> float:
    from compensation.models import CompensationItem
    from repairs.models import Incident

    terminal = {Incident.Status.REPAIRED, Incident.Status.FAILED, Incident.Status.CLOSED}
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        statuses = set(Incident.objects.filter(pk__in=incidents).values_list("status", flat=True))
        waiting = CompensationItem.objects.filter(pk__in=items, status=CompensationItem.Status.APPROVED).exists()
        if statuses <= terminal and not waiting:
            break
        time.sleep(1)
    return time.monotonic() - t0


def _ledger_check(data: dict, clients: list[Recorder]) -> dict:
    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace

    out = {"committed": 0, "lost": 0, "duplicated": 0, "unknown": 0, "unknown_landed": 0,
           "lost_ids": [], "duplicated_ids": [], "action_count_mismatch": []}
    for client, rec in zip(clients, data["recording"]):
        graph = workspace_graph(rec["workspace"])
        seen = {WRITER: Counter(), READER: Counter()}
        for agent, payload in graph.ro_query("MATCH (a:Action) RETURN a.agent, a.payload"):
            body = json.loads(payload) if isinstance(payload, str) else payload
            if agent in seen and isinstance(body, dict) and "soak" in body:
                seen[agent][body["soak"]] += 1
        out["committed"] += len(client.committed)
        for rid in client.committed:
            if seen[WRITER][rid] == 0 or seen[READER][rid] == 0:
                out["lost"] += 1
                out["lost_ids"].append(rid)
        for rid in set(seen[WRITER]) | set(seen[READER]):
            if seen[WRITER][rid] > 1 or seen[READER][rid] > 1:
                out["duplicated"] += 1
                out["duplicated_ids"].append(rid)
        ledger = set(client.committed) | set(client.unknown)
        strays = [rid for rid in seen[WRITER] if rid not in ledger]
        if strays:  # in the graph though the client was told it was refused
            out.setdefault("refused_but_landed", []).extend(strays)
        out["unknown"] += len(client.unknown)
        out["unknown_landed"] += sum(1 for rid in client.unknown if seen[WRITER][rid])
        actions = graph.ro_query("MATCH (a:Action) RETURN count(a)")[0][0]
        counted = Workspace.objects.get(name=rec["workspace"]).action_count
        if actions != counted:
            out["action_count_mismatch"].append({"workspace": rec["workspace"], "graph": actions, "postgres": counted})
    out["refused_but_landed"] = len(out.get("refused_but_landed", []))
    out["lost_all"], out["duplicated_all"] = list(out["lost_ids"]), list(out["duplicated_ids"])
    for key in ("lost_ids", "duplicated_ids"):
        out[key] = out[key][:20]
    return out


def _incidents(op: Operator) -> dict:
    from repairs.models import Incident, IncidentTransition

    rows = {}
    for flag in op.flags:
        incident = Incident.objects.get(pk=flag["incident"])
        transitions = list(IncidentTransition.objects.filter(incident=incident).order_by("at", "pk")
                           .values_list("to_status", "at"))
        repaired = next((at.timestamp() for status, at in transitions if status == IncidentStatus.REPAIRED), None)
        ended = transitions[-1][1].timestamp() if transitions else None
        rows[incident.pk] = {"desk": flag["desk"], "status": incident.status, "error": (incident.error or "")[:300],
                             "flagged_at": flag["at"], "repaired_at": repaired,
                             "open_until": repaired or ended or time.time(),
                             "flag_to_repaired_s": repaired - flag["at"] if repaired else None,
                             "attempts": incident.attempts,
                             "statuses": [s for s, _ in transitions]}
    return rows


def _items(op: Operator) -> dict:
    from compensation.models import CompensationItem

    ids = [a["item"] for a in op.approvals]
    statuses = Counter(CompensationItem.objects.filter(pk__in=ids).values_list("status", flat=True))
    return {"approved": len(ids), "executed": statuses.get(ItemStatus.EXECUTED, 0),
            "not_executed": {s: n for s, n in statuses.items() if s != ItemStatus.EXECUTED}}


def _fault_rows(op: Operator, incidents: dict, probe: soak_faults.ReadyProbe | None = None,
                ledger: dict | None = None, clients: list | None = None) -> list[dict]:
    committed_at = {}
    for client in clients or []:
        committed_at.update(client.committed_at)
    rows = []
    for fault in sorted(op.faults, key=lambda f: f["began"]):
        window = (fault["began"], fault["ended"] + FAULT_LEDGER_AFTER_S)
        mine = lambda ids: sum(1 for rid in ids if window[0] <= committed_at.get(rid, -1.0) <= window[1])  # noqa: E731
        fault = {**fault, "committed": mine(committed_at),
                 "lost": mine((ledger or {}).get("lost_all", [])),
                 "duplicated": mine((ledger or {}).get("duplicated_all", [])),
                 "to_healthy_s": probe.healthy_after(fault["began"], fault["ended"]) if probe else None,
                 "readyz_said": probe.red_between(fault["began"], fault["ended"]) if probe else {}}
        hit = [pk for pk, r in incidents.items()
               if r["flagged_at"] <= fault["ended"] and r["open_until"] >= fault["began"]]
        repaired = [incidents[pk]["repaired_at"] for pk in hit]
        all_repaired = bool(hit) and all(repaired)
        # Repaired while the fault lasted (a phase that did not need the dependency): 0 s after its end.
        rows.append({**fault, "incidents": hit, "all_repaired": all_repaired,
                     "to_repaired_s": max(repaired) - fault["began"] if all_repaired else None,
                     "statuses": {pk: incidents[pk]["statuses"] for pk in hit},
                     "repaired_during_fault": all_repaired and max(repaired) <= fault["ended"],
                     "end_to_repaired_s": max(0.0, max(repaired) - fault["ended"]) if all_repaired else None})
    return rows


WINDOWS = ("baseline", "soak", "no_fault", "fault")


def _latency_rows(samples: Samples, baseline_s: float, faults: list[dict]) -> list[dict]:
    """Per endpoint, answered requests' latencies: the baseline, everything after it (`soak`), and that
    split into requests started while no dependency was faulted and while one was."""
    spans = [(f["began"] - samples.wall0, f["ended"] - samples.wall0) for f in faults]
    by = defaultdict(lambda: {**{w: [] for w in WINDOWS}, "errors": Counter()})
    for at, endpoint, seconds, status in samples.rows:
        entry = by[endpoint]
        if not status or status >= 400:
            entry["errors"][str(status or "no answer")] += 1
            continue
        if at < baseline_s:
            entry["baseline"].append(seconds)
            continue
        entry["soak"].append(seconds)
        entry["fault" if any(b <= at <= e for b, e in spans) else "no_fault"].append(seconds)
    rows = []
    for endpoint, e in sorted(by.items()):
        row = {"endpoint": endpoint, "errors": dict(e["errors"])}
        for window in WINDOWS:
            values = e[window]
            row[window] = {"count": len(values), "p50_ms": common.pct(values, 50) * 1000,
                           "p95_ms": common.pct(values, 95) * 1000, "p99_ms": common.pct(values, 99) * 1000}
        rows.append(row)
    return rows


# --- the run -----------------------------------------------------------------------------------------------
def _guard_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))


def run(quick: bool, minutes: float | None = None, faults: tuple[str, ...] | None = None) -> dict:
    """`faults`: which to strike, in order (default: the classic four under --quick, all eight otherwise)."""
    minutes = minutes or (1.0 if quick else 10.0)
    mode = "quick" if quick else "full"
    faults = tuple(faults or (CLASSIC if quick else FAULTS))
    plan, desks_n = schedule(faults)
    _guard_signals()
    SERVER_ENV["KINTSUGI_REPLAY_OUTAGE_SECONDS"] = str(soak_faults.REPLAY_OUTAGE_SECONDS[mode])
    # The bench's own restart of a killed FalkorDB waits its load out (the servers see it as starting).
    os.environ["KINTSUGI_STORE_START_WAIT_SECONDS"] = "600"
    for key, value in SERVER_ENV.items():
        os.environ[key] = value
    from django.conf import settings

    for key, value in SERVER_ENV.items():  # the bench process reads the graph with the servers' deadlines
        if hasattr(settings, key):
            setattr(settings, key, type(getattr(settings, key))(value))
    run_id = time.strftime("%Y%m%d%H%M%S")
    clients = sum(CLIENTS.values())
    common.log(f"soak: {desks_n} desks, {clients} recording workspaces; faults {', '.join(faults)}")
    agent = soak_faults.RemoteAgent() if "agent_down" in faults else None
    remote = {arg[0]: agent for _, kind, arg in plan if kind == "agent_down"}
    data = _prepare(run_id, clients, DESK_TICKETS[mode], desks_n, remote)
    tmp = Path(tempfile.mkdtemp(prefix="kintsugi-soak-"))
    common._dirs.append(tmp)  # removed at exit with the bench's stores
    stack = Stack(tmp)
    falkordb = Store(0, graph=True, url=common.FALKORDB_URL)
    broker = Store(1, graph=False, url=os.environ["CELERY_BROKER_URL"])
    try:
        stack.start()
        common.log(f"soak: web, worker and beat up on {stack.base}; {minutes:g} min")
        result = asyncio.run(_soak(stack, data, minutes, quick, falkordb, broker, plan, agent))
        op: Operator = result["operator"]
        incident_ids = [f["incident"] for f in op.flags]
        drained = _wait_settled(incident_ids, [a["item"] for a in op.approvals], DRAIN_S[mode])
        alive = stack.alive()
        logs = {name: stack.log_tail(name) for name, up in alive.items() if not up}
    finally:
        stack.stop()
    ledger = _ledger_check(data, result["clients"])
    incidents = _incidents(op)
    faults = _fault_rows(op, incidents, result["probe"], ledger, result["clients"])
    for fault in faults:  # the requests in flight while it lasted: the slowest answer, those unanswered
        during = [(sec, st) for at, _, sec, st in result["samples"].rows
                  if result["samples"].wall0 + at <= fault["ended"]
                  and result["samples"].wall0 + at + sec >= fault["began"]]
        fault["requests"] = len(during)
        fault["slowest_answer_s"] = max((sec for sec, st in during if st), default=0.0)
        fault["unanswered"] = sum(1 for _, st in during if not st)
        fault["answered_503"] = sum(1 for _, st in during if st == 503)
    for key in ("lost_all", "duplicated_all"):
        ledger.pop(key)
    items = _items(op)
    latencies = _latency_rows(result["samples"], result["baseline_s"], faults)
    from bench.containment import figures

    contained = figures(incident_ids)
    out = {
        "minutes": minutes, "baseline_s": result["baseline_s"], "elapsed_s": result["elapsed_s"], "drain_s": drained,
        "clients": {"per_call": CLIENTS["per_call"], "batch": CLIENTS["batch"], "batch_roots": BATCH_ROOTS},
        "lost": ledger["lost"], "duplicated": ledger["duplicated"], "ledger": ledger,
        "incidents": {str(k): v for k, v in incidents.items()},
        "all_repaired": bool(incidents) and all(r["status"] == IncidentStatus.REPAIRED for r in incidents.values()),
        "faults": faults, "approvals": items, "latency": latencies,
        "refused": {str(k): v for k, v in sum((c.refused for c in result["clients"]), Counter()).items()},
        "no_retry_after": result["samples"].no_retry_after, "processes_alive_at_end": alive,
        "dead_process_logs": logs, "notes": op.notes[:50], "unanswered": dict(result["samples"].unanswered),
        "slowest": [{"at_s": at, "endpoint": e, "seconds": sec, "status": st}
                    for at, e, sec, st in sorted(result["samples"].rows, key=lambda row: -row[2])[:10]],
        "server_env": SERVER_ENV, "load_avg_end": common.load_avg(), "faults_selected": list(faults),
        "remote_agent": {"requests": len(agent.requests), "errors": agent.errors[:10]} if agent else None,
        "containment": {k: v for k, v in contained.items() if k != "seconds"},
    }
    _report(out)
    return out


def _report(out: dict) -> None:
    rows = []
    for r in out["latency"]:
        b, s, n, f = r["baseline"], r["soak"], r["no_fault"], r["fault"]
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "0"
        rows.append([r["endpoint"], b["count"], b["p95_ms"], s["count"], s["p50_ms"], s["p95_ms"], s["p99_ms"],
                     n["p95_ms"], f["count"], f["p95_ms"], errors])
    common.table(f"soak: requests per endpoint ({out['minutes']:g} min; baseline = the first {out['baseline_s']:.0f}s, "
                 f"recording only)",
                 ["endpoint", "baseline n", "baseline p95 ms", "soak n", "p50 ms", "p95 ms", "p99 ms",
                  "p95 ms no fault", "n in faults", "p95 ms in faults", "errors"], rows,
                 [f"{out['clients']['per_call']} clients call by call, {out['clients']['batch']} in batches of "
                  f"{out['clients']['batch_roots']} roots; 'soak' is everything after the baseline (flags, repairs, "
                  f"approvals, faults), split into requests started with no fault on and during one; latencies of "
                  f"answered requests, errors counted apart",
                  f"503s without Retry-After: {out['no_retry_after']}; load average at the end {out['load_avg_end']}"])
    l = out["ledger"]
    fault_rows = []
    for f in out["faults"]:
        if not f["incidents"]:
            after = "- (none open)"
        elif f["end_to_repaired_s"] is None:
            after = "NOT repaired"
        else:
            after = "0 (repaired during it)" if f["repaired_during_fault"] else f["end_to_repaired_s"]
        healthy = "-" if f.get("to_healthy_s") is None else f["to_healthy_s"]
        fixed = "-" if f.get("to_repaired_s") is None else f["to_repaired_s"]
        fault_rows.append([f["label"], f["seconds"], ", ".join(f"#{i}" for i in f["incidents"]) or "-", after,
                           healthy, fixed, f.get("committed", "-"), f.get("lost", "-"), f.get("duplicated", "-"),
                           f.get("slowest_answer_s", "-"), f.get("unanswered", "-")])
    blank = ["-"] * 7
    for pk, r in out["incidents"].items():
        if not any(int(pk) in f["incidents"] for f in out["faults"]):
            fault_rows.append([f"no fault (control): desk {r['desk']}", 0.0, f"#{pk}",
                               f"flag → repaired {common.fmt(r['flag_to_repaired_s'])}" if r["flag_to_repaired_s"]
                               else "NOT repaired"] + blank)
    said = [f"{f['kind']}: /readyz said {f['readyz_said'] or 'green throughout'}; incidents "
            + "; ".join(f"#{pk} {' → '.join(st)}" for pk, st in f.get("statuses", {}).items())
            + "".join(f"; {k} {common.fmt(f[k]) if isinstance(f[k], float) else f[k]}"
                      for k in ("incremental_mb", "base_mb", "back_after_s", "processes_frozen", "supervision")
                      if k in f)
            for f in out["faults"] if f["kind"] in soak_faults.NEW_FAULTS]
    common.table("soak: faults → repaired",
                 ["fault", "seconds", "incidents open during it", "fault end → repaired s", "strike → healthy s",
                  "strike → repaired s", "roots committed", "lost", "duplicated", "slowest answer s", "unanswered"],
                 fault_rows, ["incidents: " + ", ".join(
                     f"#{pk} {r['status']} ({r['attempts']} attempts, flag → repaired "
                     f"{common.fmt(r['flag_to_repaired_s'])}s{'' if r['status'] == 'repaired' else ': ' + r['error']})"
                     for pk, r in out["incidents"].items()),
                     "healthy: the first green /readyz after the fault's end; roots committed, lost and duplicated: "
                     f"those the server said it committed from the strike to {FAULT_LEDGER_AFTER_S:g} s after the end; "
                     "slowest answer and unanswered: requests in flight during the fault"] + said)
    c = out["containment"]
    common.table("soak: containment (flag → contained; effects held by recordings that read through it)",
                 ["incidents", "not contained at the flag", "flag → contained p50 s", "p99 s", "max s", "held",
                  "performed", "dropped", "released", "still held"],
                 [[c["containments"], c["not_contained"], c["p50_s"], c["p99_s"], c["max_s"], c["held"],
                   c["performed"], c["dropped"], c["released"], c["still_held"]]],
                 ["settled by each incident's repair: performed when the clean run made the same effect, dropped "
                  "otherwise; 'paid live' is measured by `bench live` (in-process recordings it can inspect)"])
    a = out["approvals"]
    common.table("soak: recordings and approvals", ["committed roots", "lost", "duplicated", "unknown (no answer)",
                                                    "of those landed", "refused but landed", "approved", "executed"],
                 [[l["committed"], l["lost"], l["duplicated"], l["unknown"], l["unknown_landed"],
                   l["refused_but_landed"], a["approved"], a["executed"]]],
                 [f"refusals retried (by status): {out['refused'] or 'none'}; action count Postgres = graph: "
                  f"{'yes' if not l['action_count_mismatch'] else l['action_count_mismatch']}",
                  f"processes alive at the end: {out['processes_alive_at_end']}; unanswered requests: "
                  f"{out['unanswered'] or 'none'}"] + out["notes"][:10])


def clean(out: dict) -> bool:
    """The soak's verdict: nothing lost or duplicated, every incident repaired, every approval executed."""
    return (out["lost"] == 0 and out["duplicated"] == 0 and out["ledger"]["refused_but_landed"] == 0
            and not out["ledger"]["action_count_mismatch"] and out["all_repaired"]
            and out["approvals"]["executed"] == out["approvals"]["approved"])
