"""The suite's plain helpers, in one place: people in roles, a flagged and repaired source, graph dumps, the
audit tests' owner connection and commands, API clients, a real Celery worker, waiting. Fixtures (in the
conftest.py files) build on these; nothing here starts a server or touches the database on import."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from core import embedded
from core.audit import actions
from core.roles import AUDITOR, REVIEWER, ROLES, SUPPORT_LEAD, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.recording.services import desk_run, get_workspace
from repairs.job import run_repair
from repairs.models import Incident
from repairs.services import flag_source

# The tests' own probe events, declared in the event registry like every audit action (core.audit.actions).
for _probe in ("probe", "test.event", "test.derived", "test.system", "test.appended", "test.note", "test.append",
               "test.late", "test.after_cut", "test.more", "test.after", "test.spare"):
    actions.declare(_probe, "test", ("i", "note"))
actions.declare("test.incident", "incident")

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pass-1234-kintsugi"

# The FalkorDB servers this test process started (tests/conftest.py adds them as it starts them).
FALKORDB_SERVERS: list[str] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 120, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


# People ------------------------------------------------------------------------------------------------

def create_user(username: str, *roles: str, workspaces=(), staff: bool = True, **extra):
    """A user in these roles (core.roles) and a member of these workspaces."""
    # A transactional test's flush drops the groups the data migration created; most tests find them.
    if Group.objects.filter(name__in=ROLES).count() < len(ROLES):
        ensure_roles()
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=staff, **extra)
    for name in roles:
        user.groups.add(Group.objects.get(name=name))
    for ws in workspaces:
        ws.members.add(user)
    return user


def make_people() -> SimpleNamespace:
    """A team in the three roles, and one person in two of them."""
    return SimpleNamespace(
        lead=create_user("lead1", SUPPORT_LEAD),
        reviewer=create_user("reviewer1", REVIEWER),
        auditor=create_user("auditor1", AUDITOR),
        # Both roles: only four-eyes stops them from approving their own incident.
        lead_reviewer=create_user("leadrev1", SUPPORT_LEAD, REVIEWER),
    )


def flagger(name: str = "flagger"):
    user, _ = get_user_model().objects.get_or_create(username=name)
    return user


def api_key(user) -> str:
    """A key that logs `user` in to the API: the one shown when their token was made here (the token row
    holds only its digest), else the key of a new token that replaces theirs."""
    from rest_framework.authtoken.models import Token

    from provenance.access.tokens import api_key_digest

    key = getattr(user, "api_key", None)
    # A user kept across tests (a module's fixture) may hold the key of a token a test rolled back.
    if key is None or not Token.objects.filter(user=user, key=api_key_digest(key)).exists():
        Token.objects.filter(user=user).delete()
        key = user.api_key = Token.objects.create(user=user).plain_key
    return key


def client_for(user=None) -> APIClient:
    """An API client with `user`'s token (anonymous without one)."""
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
    return client


# Flagging and repairing --------------------------------------------------------------------------------

def open_incident(workspace: str, source: str = POISONED_PAGE, actor=None, *, reason: str = "poisoned") -> Incident:
    """Flag a source from the CLI (the repair is enqueued on commit; tests run it themselves)."""
    return flag_source(workspace=get_workspace(workspace), source_id=source, actor=actor or flagger(),
                       reason=reason, via=Incident.Via.CLI)


def flag_and_repair(workspace: str, source: str = POISONED_PAGE, *, actor=None, reason: str = "poisoned") -> Incident:
    """Flag a source and run its repair in this process, as a worker would."""
    return run_repair(incident_id=open_incident(workspace, source, actor, reason=reason).pk)


def repair(workspace: str, source: str = POISONED_PAGE, **kw) -> Incident:
    """Flag a source and run its repair in this process with run_repair's options `kw`."""
    return run_repair(incident_id=open_incident(workspace, source).pk, **kw)


def repaired_incident(*, flagger, workspace: str | None = None, settings=None, members=None) -> Incident:
    """The canonical desk run, the poisoned page flagged by `flagger` and repaired in-process. The
    workspace's members are `members`, by default every non-superuser the test made (its team)."""
    if settings is not None:
        settings.CELERY_TASK_ALWAYS_EAGER = False
    name = workspace or f"comp-{uuid.uuid4().hex[:8]}"
    desk_run(workspace=name)
    team = members if members is not None else get_user_model().objects.filter(is_superuser=False)
    get_workspace(name).members.add(*team)
    return flag_and_repair(name, actor=flagger, reason="poisoned partner page")


def wait_until_finished(incident: Incident, timeout: float) -> None:
    """Wait until a repair running in a real worker has ended, repaired or failed."""
    wait_for(lambda: Incident.objects.get(pk=incident.pk).status in ("repaired", "failed"), timeout=timeout)


# What is stored ----------------------------------------------------------------------------------------

# What a verification took, which two runs of the same repair never share: the wall time, and when a full
# verification ran. Everything else in it (the counts, the rows, the set, actions re-run, replay calls)
# is the outcome, the same for the same repair however often it was interrupted.
VERIFICATION_TIMING_KEYS = frozenset({"seconds", "at"})


def verification_outcome(verification):
    """A verification dict without its timing keys (its own, and its whole-desk run's under `full`);
    the differing rows are outcome and stay as they are. Compare two runs' outcomes exactly with it."""
    if not isinstance(verification, dict):
        return verification
    out = {k: v for k, v in verification.items() if k not in VERIFICATION_TIMING_KEYS}
    if isinstance(out.get("full"), dict):
        out["full"] = {k: v for k, v in out["full"].items() if k not in VERIFICATION_TIMING_KEYS}
    return out


def graph_dump(workspace: str) -> dict:
    """Everything in a workspace graph that a repair can touch, id for id."""
    g = workspace_graph(workspace)
    return {
        "actions": g.ro_query("MATCH (a:Action) RETURN a.id, a.agent, a.seq, a.status, a.dhash, a.payload ORDER BY a.id"),
        "facts": g.ro_query("MATCH (f:Fact) RETURN f.id, f.key, f.version, f.active ORDER BY f.id"),
        "effects": g.ro_query("MATCH (e:Effect) RETURN e.id, e.kind, e.ticket, e.amount, e.live, e.held ORDER BY e.id"),
        "edges": g.ro_query("MATCH (a)-[r]->(b) RETURN type(r), coalesce(a.id, ''), coalesce(b.id, '') "
                            "ORDER BY type(r), coalesce(a.id, ''), coalesce(b.id, '')"),
    }


def inputs_by_step(workspace: str) -> dict:
    """(ticket, source, agent lineage from the root) → (action id, the inputs it saw: payload and the values of
    the facts it read). The lineage tells a notifier after a refund from a notifier after a reply."""
    g = workspace_graph(workspace)
    rows = g.ro_query(
        "MATCH (a:Action) WHERE NOT a.status IN ['poisoned', 'superseded'] "
        "OPTIONAL MATCH (a)-[:READ]->(f:Fact) RETURN a.id, a.agent, a.ticket, a.parent, a.payload, "
        "collect([f.key, f.value])")
    by_id = {r[0]: r for r in rows}

    def lineage(aid):
        chain = []
        while aid is not None and aid in by_id:
            chain.append(by_id[aid][1])
            aid = by_id[aid][3]
        return tuple(reversed(chain))

    return {(r[2], json.loads(r[4]).get("source"), lineage(r[0])): (r[0], json.loads(r[4]), sorted(tuple(x) for x in r[5] if x[0] is not None))
            for r in rows}


def graph_counts(workspace: str) -> tuple[int, int]:
    """(nodes, edges) of a workspace graph; (0, 0) when it does not exist."""
    return _node_and_edge_counts(workspace_graph(workspace))


def _node_and_edge_counts(graph) -> tuple[int, int]:
    if not graph.exists():
        return 0, 0
    nodes = graph.ro_query("MATCH (n) RETURN count(n)")[0][0]
    edges = graph.ro_query("MATCH ()-[r]->() RETURN count(r)")[0][0]
    return nodes, edges


def row_counts() -> dict[str, int]:
    """Rows of every table an edge could write to."""
    from compensation.models import AuditEvent, CompensationItem
    from provenance.models import LedgerEntry, OutboxEmail, Source, Ticket, Workspace
    from repairs.models import IncidentTransition

    models = (Workspace, Source, Ticket, LedgerEntry, OutboxEmail, Incident, IncidentTransition, CompensationItem,
              AuditEvent)
    return {m.__name__: m.objects.count() for m in models}


def delete_model_caches() -> None:
    """Delete every model response cache (the shared one and each workspace's) on every server."""
    from provenance.graph.graph import Graph, _db

    for url in FALKORDB_SERVERS:
        for name in _db(url).list_graphs():
            if name.startswith(settings.KINTSUGI_GRAPH_PREFIX + ":") and name.endswith(":llm_cache"):
                Graph(name, url).delete()


def clear_cache() -> None:
    """Delete this run's keys from the shared Redis cache (throttle counters, login lockouts). Not
    cache.clear(): that empties the whole Redis database, other runs' keys with it."""
    from django.core.cache import cache

    client = cache._cache.get_client(None, write=True)
    keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
    if keys:
        client.delete(*keys)


# Module-wide desks ----------------------------------------------------------------------------------

# Graphs of the module-wide desks (shared_graphs): name -> (server, version, fingerprint) as the module built them.
SHARED_GRAPHS: dict[str, tuple[str, tuple, str]] = {}


def graph_fingerprint(name: str, url: str) -> str:
    """Everything the graph holds, hashed: exact, and 40 ms for the canonical desk."""
    from provenance.graph.graph import Graph

    graph = Graph(name, url)
    if not graph.exists():
        return ""
    rows = graph.ro_query("MATCH (n) RETURN labels(n), properties(n)")
    edges = graph.ro_query("MATCH (a)-[r]->(b) RETURN type(r), properties(r), properties(a), properties(b)")
    return hashlib.sha256(repr((sorted(map(repr, rows)), sorted(map(repr, edges)))).encode()).hexdigest()


def graph_version(name: str, url: str) -> tuple:
    """What moves whenever the graph is written through provenance.graph.graph, from any process: its stamp,
    which every write and delete changes, and its size. Cheap enough to check after every test; the
    fingerprint checks the rest once the module is done."""
    from provenance.graph.graph import Graph

    graph = Graph(name, url)
    return tuple(graph._stamp_call("HMGET", graph.stamp_key, "epoch", "hwm", "pending")), _node_and_edge_counts(graph)


def changed_shared_graphs() -> list[str]:
    return [name for name, (url, version, _) in SHARED_GRAPHS.items() if graph_version(name, url) != version]


def _graphs_of(workspace: str) -> list[tuple[str, str]]:
    from provenance.graph.graph import graph_name, server_url, workspace_server

    url = server_url(workspace_server(workspace))
    return [(graph_name(workspace), url), (graph_name(workspace, baseline=True), url)]


@contextmanager
def shared_graphs(*workspaces: str):
    """Keep these workspaces' graphs from one test to the next (the module's tests only read them) and
    delete them at the end. A test that changes one of them fails: it needs a desk of its own."""
    from provenance.graph.graph import Graph

    graphs = [g for ws in workspaces for g in _graphs_of(ws)]
    for name, url in graphs:
        if (graph := Graph(name, url)).exists():
            graph.stamp()  # a first read would give a graph never stamped its epoch: give it now
        SHARED_GRAPHS[name] = (url, graph_version(name, url), graph_fingerprint(name, url))
    try:
        yield
        # A write that went round provenance.graph.graph moves no stamp: the contents tell, at the module's end.
        changed = [name for name, url in graphs if graph_fingerprint(name, url) != SHARED_GRAPHS[name][2]]
        assert not changed, f"a test of this module changed graphs it shares ({', '.join(changed)}) behind " \
                            "provenance.graph.graph's back: give it a desk of its own"
    finally:
        for name, url in graphs:
            SHARED_GRAPHS.pop(name, None)
            Graph(name, url).delete()


# The module transactions open now (a transactional test inside one would commit nothing and flush it).
MODULE_TRANSACTIONS: list = []


@contextmanager
def module_transaction(django_db_blocker):
    """A transaction around a module's tests, each test's own nested in it (Django's setUpTestData
    pattern), rolled back at the end: what a module fixture writes in it is there for every test of the
    module and gone after. Only for modules without transactional tests (their flush would empty it)."""
    from django.db import transaction

    with django_db_blocker.unblock(), transaction.atomic():
        MODULE_TRANSACTIONS.append(django_db_blocker)
        try:
            yield
        finally:
            MODULE_TRANSACTIONS.pop()
            transaction.set_rollback(True)


# The model ----------------------------------------------------------------------------------------------

def offline_answer(request) -> dict:
    """A fake Gemini responder that answers each registered task with its offline implementation (the
    request's system instruction names the task)."""
    from compensation.drafting.item_kinds import MODEL_TASKS
    from provenance import llm

    for task in [*map(llm.registered_task, llm.task_names()), *MODEL_TASKS.values()]:
        if task.instruction == request.system_instruction:
            payload = request.user_json
            return task.offline(payload["input"], payload["facts"])
    raise AssertionError(f"unknown task instruction: {request.system_instruction[:60]!r}")


# The audit record --------------------------------------------------------------------------------------

def owner_connection() -> psycopg.Connection:
    """A connection to the test database as its owner (the superuser), outside Django."""
    d = settings.DATABASES["owner"]
    return psycopg.connect(dbname=connection.settings_dict["NAME"], host=d["HOST"] or d.get("OPTIONS", {}).get("host"),
                           port=d["PORT"] or 5432, user=d["USER"], password=d["PASSWORD"] or None, autocommit=True)


def behind_the_triggers_back(sql: str, params=()) -> None:
    """What the owner can do: switch triggers off for the session and change rows."""
    with owner_connection() as db:
        db.execute("SET session_replication_role = replica")
        db.execute(sql, params)


def run_command(capsys, *args) -> tuple[int, str]:
    try:
        call_command(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def signed_chains(*, a_rows: int = 10, b_rows: int = 6, system_rows: int = 3) -> SimpleNamespace:
    """Two workspaces' chains and the system chain, committed and signed."""
    from core.audit import checkpoints, trail
    from provenance.models import Workspace

    a, b = Workspace.objects.create(name="audit-a"), Workspace.objects.create(name="audit-b")
    for ws, n in ((a, a_rows), (b, b_rows), (None, system_rows)):
        for i in range(n):
            trail.record(action="test.event", subject_type="test", subject_id=i, via="cli", reason=f"event {i}",
                         workspace=ws, data={"i": i})
    checkpoints.flush()
    return SimpleNamespace(a=a, b=b)


# A real Celery worker ----------------------------------------------------------------------------------

def database_url(db: dict, name: str) -> str:
    """The URL of database `name` on the server of a DATABASES entry, as its user: over TCP, or over the
    unix socket whose directory is HOST (the embedded server), percent-encoded as libpq reads it."""
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    return f"postgresql://{db['USER']}@{host}:{db['PORT'] or 5432}/{name}"


def worker_env(db_name: str, **extra: str) -> dict:
    """The environment of a process that works beside this test process: the same test database (as its
    owner's URL; the process derives the app role), FalkorDB servers, broker and prefixes."""
    env = dict(os.environ)
    db = settings.DATABASES["owner"]
    env.update({
        "DJANGO_SETTINGS_MODULE": "kintsugi_site.settings.test",
        "DATABASE_URL": database_url(db, db_name),
        "FALKORDB_URL": os.environ["FALKORDB_URL"],  # the session's server, whatever a test overrides
        "KINTSUGI_FALKORDB_URLS": ",".join(settings.KINTSUGI_FALKORDB_URLS),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_TASK_ALWAYS_EAGER": "0",
    })
    env.update(extra)
    return env


class Worker:
    """A real Celery worker process against the test database."""

    def __init__(self, env: dict, log: Path, *, beat: bool = False):
        self.env, self.log, self.proc, self.beat = env, log, None, beat

    def start(self) -> "Worker":
        # With beat the worker also runs the schedule (the outage sweep), its state file beside the log.
        beat = ["-B", "-s", str(self.log.with_suffix(".beat"))] if self.beat else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kintsugi_site", "worker", "-l", "warning", "-c", "1",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"test{time.time_ns()}@%h", *beat],
            cwd=ROOT, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=embedded.stop_when_parent_dies,  # gone with the session, even one killed outright
        )
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def purge_broker() -> None:
    from kintsugi_site.celery import app

    app.control.purge()


@contextmanager
def app_role_may_delete(*models, privilege: str = "DELETE"):
    """For a test that removes rows of the record of money and incidents to compare a redo with the
    original, or to see a trigger fire (never something the application does): the owner lends the
    application's role DELETE (or TRUNCATE) on those tables for the block, and takes it back."""
    from django.db import connection

    from core.db_roles import split_roles

    if not split_roles():
        yield
        return
    role = connection.settings_dict["USER"]
    tables = ", ".join(f'"{m._meta.db_table}"' for m in models)
    with owner_connection() as db:
        db.execute(f'GRANT {privilege} ON {tables} TO "{role}"')
    try:
        yield
    finally:
        with owner_connection() as db:
            db.execute(f'REVOKE {privilege} ON {tables} FROM "{role}"')



def repair_example_desk(example_desk, name: str, prefix: str):
    """Record example desk `name` poisoned and clean (workspaces `<prefix>-poisoned`, `<prefix>-clean`), check
    that its replay server refuses a replay its registration's secret did not sign, flag the poisoned note
    and repair through the desk's replay endpoint: the repaired workspace is the clean one, verification
    0 / 0 / 0, and nothing performed again. Returns the incident, for the desk's own counts."""
    from kintsugi_client.signing import sign
    from provenance.recording.selectors import export_state
    from repairs.job import run_repair
    from tests.helpers import open_incident

    poisoned = example_desk(name, f"{prefix}-poisoned")
    clean = example_desk(name, f"{prefix}-clean", poisoned=False)
    assert (poisoned.actions, clean.actions) == (9, 7)
    before = export_state(workspace=f"{prefix}-poisoned")
    assert before != export_state(workspace=f"{prefix}-clean")
    assert {"ticket": "t02", "choice": "refund", "level": "full"} in before["decisions"]  # the note's doing
    performed = list(poisoned.performed)
    assert ("t02", "refund", 9000) in performed

    # A replay its registration's secret did not sign is refused before the agent runs.
    triage = f"{prefix}_triage"
    forged = json.dumps({"agent": triage, "action": 1, "payload": {}, "base_url": "http://127.0.0.1:9",
                         "token": "t", "purpose": "repair", "replay_id": "forged-1"}).encode()
    ts, signature = sign(forged, poisoned.secrets[triage] + "x")
    assert poisoned.post_replay(forged, {"X-Kintsugi-Timestamp": str(ts), "X-Kintsugi-Signature": signature}) == 401
    assert poisoned.post_replay(forged, {}) == 401

    incident = run_repair(incident_id=open_incident(f"{prefix}-poisoned", poisoned.scenario.POISONED).pk)
    v = incident.verification
    assert incident.status == "repaired" and (v["facts"], v["decisions"], v["effects"]) == (0, 0, 0)
    assert export_state(workspace=f"{prefix}-poisoned") == export_state(workspace=f"{prefix}-clean")
    assert poisoned.performed == performed  # re-runs and the baseline replayed here; nothing performed again
    return incident


@contextmanager
def bench_env(database: str, *, home: Path | None = None):
    """The environment of a benchmark a test runs in its own process: this run's Postgres server with a
    database of the benchmark's own (`<test database>_<database>`, dropped afterwards, whatever happened),
    `home` as its KINTSUGI_HOME if given, and none of the test process's FalkorDB, broker or kintsugi
    settings (the benchmark starts its own)."""
    from psycopg import sql

    base, _, name = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test").rpartition("/")
    db = f"{name.split('?')[0]}_{database}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "FALKORDB", "CELERY", "KINTSUGI"))}
    env["DATABASE_URL"] = f"{base}/{db}"
    if home is not None:
        env["KINTSUGI_HOME"] = str(home)
    try:
        yield env
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def run_quick_bench(name: str, tmp_path: Path, *, own_home: bool = False, timeout: float) -> tuple[dict, str]:
    """`python -m bench NAME --quick` in its own process and database (bench_env; `own_home`: a
    KINTSUGI_HOME under tmp_path, for a benchmark whose audit checkpoints must not meet an earlier run's).
    Asserts it exited 0 and returns its results and what it printed."""
    out = tmp_path / f"{name}.json"
    with bench_env(f"bench_{name}", home=tmp_path / "home" if own_home else None) as env:
        proc = subprocess.run([sys.executable, "-m", "bench", name, "--quick", "--output", str(out)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())["benchmarks"][name], proc.stdout


def recording_api(workspace, agents, *, actor) -> APIClient:
    """An API client holding a new recording token of `workspace`, with `agents` registered there as agents
    of another process (a replay address nothing listens on)."""
    from provenance.access.onboarding import issue_agent_token, register_agent

    for name in agents:
        register_agent(workspace=workspace, name=name, replay="http://127.0.0.1:9/replay", actor=actor, reason="t",
                       via="cli")
    _, key = issue_agent_token(workspace=workspace, label="t", actor=actor, reason="t", via="cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client
