"""Deadlines everywhere a request waits, against real stores that stop answering: a broker (and the
cache on its server) frozen with SIGSTOP, a Postgres that accepts connections and never answers (a frozen
server looks like that to a client: the kernel completes the handshake, nothing answers the login) and one
that is gone. Each request path answers within its deadline, measured here: 503 in the error shape with
Retry-After, never 500 and never a hang; an approval is stored at once and executed later exactly once."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from compensation.delivery.execution import execute_approved
from compensation.models import CompensationItem
from core.roles import REVIEWER, SUPPORT_LEAD
from compensation.tasks import execute_compensation
from compensation.delivery_models import DeliveryAttempt
from provenance.models import Source, Workspace
from provenance.recording.services import desk_run
from repairs.models import Incident
from tests.helpers import POISONED_PAGE, client_for, create_user
from tests.ops.test_broker_deadline import frozen_broker  # noqa: F401  (the fixture, by name)
from tests.ops.test_frozen_falkordb import _free_port, frozen  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What a request may take when a store is away: the store's deadline and a margin for a loaded machine.
BROKER_REQUEST_DEADLINE = 3.0
POSTGRES_REQUEST_DEADLINE = 6.0  # libpq's connect_timeout (3 s) and the margin


def _pending_item(name: str) -> CompensationItem:
    ws = Workspace.objects.create(name=name)
    flagger = create_user(f"{name}-flagger", SUPPORT_LEAD, workspaces=[ws])
    incident = Incident.objects.create(workspace=ws, run_number=1, source_id="partner/page", reason="poisoned",
                                       flagged_by=flagger, flagged_via="cli", status="repaired",
                                       verification={"facts": 0, "decisions": 0, "effects": 0})
    return CompensationItem.objects.create(
        incident=incident, kind=CompensationItem.Kind.CORRECTION_EMAIL, draft_key=f"{name}:1", ticket_id="t01",
        customer_email="ann@customers.example", to="ann@customers.example", subject="A correction",
        body="Dear Ann, an earlier message was wrong.", facts={"customer_email": "ann@customers.example"},
        original={}, valid=True)


@pytest.mark.django_db
def test_an_approval_with_the_broker_frozen_is_stored_at_once_and_executed_later_exactly_once(
        frozen_broker, settings, django_capture_on_commit_callbacks):  # noqa: F811
    settings.CELERY_TASK_ALWAYS_EAGER = False
    item = _pending_item("frozen-approve")
    reviewer = create_user("frozen-approve-reviewer", REVIEWER, workspaces=[item.incident.workspace])
    start = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        answer = client_for(reviewer).post(f"/api/v1/review-items/{item.pk}/approve/", {"reason": "checked"},
                                           format="json")
    took = time.monotonic() - start
    assert answer.status_code == 200, answer.content
    assert took < BROKER_REQUEST_DEADLINE, took  # it took 15 s before the send had a deadline
    item.refresh_from_db()
    assert item.status == CompensationItem.Status.APPROVED  # stored, waiting for the sweep
    assert execute_approved() == 1  # the sweep executes what the broker did not take
    assert execute_approved() == 0
    execute_compensation.apply(args=[item.pk])  # the task the frozen broker took late, delivered after all
    item.refresh_from_db()
    assert item.status == CompensationItem.Status.EXECUTED
    assert DeliveryAttempt.objects.filter(delivery__item=item).count() == 1  # one email left, not two


@pytest.mark.django_db
def test_a_flag_with_the_broker_frozen_answers_at_once_and_the_repair_waits_for_the_sweep(
        frozen_broker, settings, make_user, django_capture_on_commit_callbacks):  # noqa: F811
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="frozen-flag")
    ws = Workspace.objects.get(name="frozen-flag")
    lead = make_user("frozen-flag-lead", roles=["Support lead"], workspaces=[ws])
    source = Source.objects.get(workspace=ws, source_id=POISONED_PAGE)
    start = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        answer = client_for(lead).post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "poisoned"}, format="json")
    took = time.monotonic() - start
    assert answer.status_code == 201, answer.content
    assert took < BROKER_REQUEST_DEADLINE, took
    incident = Incident.objects.get(pk=answer.json()["id"])
    assert incident.status == Incident.Status.BLOCKED and "could not enqueue" in incident.error


@pytest.mark.django_db
def test_a_frozen_cache_answers_503_with_retry_after_within_its_deadline(frozen, settings, make_user):  # noqa: F811
    ws = Workspace.objects.create(name="frozen-cache")
    source = Source.objects.create(workspace=ws, source_id="kb/a", content="x")
    lead = make_user("frozen-cache-lead", roles=["Support lead"], workspaces=[ws])
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": frozen["url"] + "/1"}}
    frozen["freeze"]()
    start = time.monotonic()
    answer = client_for(lead).post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "poisoned"}, format="json")
    took = time.monotonic() - start
    assert took < BROKER_REQUEST_DEADLINE, took  # the throttle's counter lives there
    assert answer.status_code == 503, answer.content
    assert answer["Retry-After"].isdigit() and answer.json()["error"]["code"] == "store_unavailable"
    assert not Incident.objects.filter(workspace=ws).exists()


@pytest.mark.django_db
def test_readyz_and_metrics_with_the_broker_and_its_cache_frozen_answer_within_their_deadlines(
        frozen, settings, client):  # noqa: F811
    settings.CELERY_BROKER_URL = frozen["url"] + "/0"
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": frozen["url"] + "/1"}}
    frozen["freeze"]()
    client.get("/healthz")  # the first request loads the URLs and the middleware: not a store's wait
    start = time.monotonic()
    ready = client.get("/readyz")
    took = time.monotonic() - start
    assert took < 2.0, took  # it took 7 s
    assert ready.status_code == 503
    checks = json.loads(ready.content)["checks"]
    assert checks["broker"]["state"] == "down" and checks["postgres"]["state"] == "ok"
    start = time.monotonic()
    metrics = client.get("/metrics")
    assert time.monotonic() - start < 2 * BROKER_REQUEST_DEADLINE
    assert metrics.status_code == 200 and b'kintsugi_celery_queue_depth{queue="celery"} NaN' in metrics.content


PROBE = """
import json, os, sys, time
import django
django.setup()
from django.test import Client
client, out = Client(), {}
client.get("/healthz")  # the process's first request loads the URLs and the middleware: not a store's wait
for path, headers in (("/readyz", {}), ("/metrics", {}),
                      ("/api/v1/incidents/", {"HTTP_AUTHORIZATION": "Token " + "a" * 40})):
    start = time.monotonic()
    answer = client.get(path, **headers)
    out[path] = {"status": answer.status_code, "seconds": time.monotonic() - start,
                 "retry_after": answer.get("Retry-After"), "body": answer.content.decode()[:2000]}
print(json.dumps(out))
"""


def _probe(database_url: str, falkordb_url: str) -> dict:
    env = dict(os.environ, DATABASE_URL=database_url, FALKORDB_URL=falkordb_url, KINTSUGI_PROCESS="web",
               DJANGO_SETTINGS_MODULE="kintsugi_site.settings.test")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_within_deadlines(answers: dict) -> None:
    for path, answer in answers.items():
        assert answer["seconds"] < POSTGRES_REQUEST_DEADLINE, (path, answer)
        assert answer["status"] == 503, (path, answer)
    readyz = json.loads(answers["/readyz"]["body"])
    assert answers["/readyz"]["seconds"] < 2.0, answers["/readyz"]  # its own deadline
    assert readyz["checks"]["postgres"]["state"] == "down" and readyz["checks"]["broker"]["state"] == "ok"
    for path in ("/metrics", "/api/v1/incidents/"):
        assert answers[path]["retry_after"] and answers[path]["retry_after"].isdigit(), (path, answers[path])
        assert json.loads(answers[path]["body"])["error"]["code"] == "database_unavailable"


def test_a_frozen_postgres_answers_503_on_every_request_path_within_its_deadline(falkordb_url):
    with socket.socket() as listener:  # accepts (the kernel's handshake) and never answers: frozen
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        answers = _probe(f"postgresql://postgres@127.0.0.1:{port}/frozen", falkordb_url)
    print({path: round(answer["seconds"], 2) for path, answer in answers.items()})
    _assert_within_deadlines(answers)
    assert "no answer within" in json.loads(answers["/readyz"]["body"])["checks"]["postgres"]["error"]


def test_a_stopped_postgres_answers_503_with_retry_after_not_500(falkordb_url):
    answers = _probe(f"postgresql://postgres@127.0.0.1:{_free_port()}/stopped", falkordb_url)
    _assert_within_deadlines(answers)


def test_a_command_that_needs_no_broker_starts_beside_a_frozen_embedded_broker(tmp_path, monkeypatch):
    from core import embedded

    port = _free_port()
    monkeypatch.setenv("KINTSUGI_HOME", str(tmp_path))
    proc = embedded.start_redis_server(data_dir=tmp_path / "broker", port=port, with_graph=False,
                                       die_with_parent=True)
    os.kill(proc.pid, 19)  # SIGSTOP
    try:
        env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
        env.update(KINTSUGI_EMBEDDED_BROKER_PORT=str(port), DJANGO_SETTINGS_MODULE="kintsugi_site.settings.base")
        start = time.monotonic()
        done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        took = time.monotonic() - start
    finally:
        os.kill(proc.pid, 18)  # SIGCONT
        proc.terminate()
        proc.wait(timeout=20)
    assert done.returncode == 0, done.stderr[-2000:]  # it died at settings import (ServerUnresponsive)
    assert took < 15, took


SETTINGS = """
import json
import django
django.setup()
from django.conf import settings
print(json.dumps({alias: db.get("OPTIONS", {}) for alias, db in settings.DATABASES.items()}))
print(settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS)
"""


def _database_options(**env) -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="kintsugi_site.settings.test", **env)
    done = subprocess.run([sys.executable, "-c", SETTINGS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    *_, options, graph_timeout = done.stdout.strip().splitlines()
    return {**json.loads(options), "graph_timeout": float(graph_timeout)}


def test_only_a_web_process_cancels_a_long_statement_and_every_process_has_a_connect_timeout(monkeypatch):
    import psycopg
    from django.db import connections

    monkeypatch.delenv("KINTSUGI_PROCESS", raising=False)
    worker = _database_options()
    web = _database_options(KINTSUGI_PROCESS="web", KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS="0.5")
    # A web request waits seconds for a frozen graph store; a repair waits out its largest query.
    assert (worker.pop("graph_timeout"), web.pop("graph_timeout")) == (120.0, 15.0)
    assert all(options["connect_timeout"] == 3 for options in (*worker.values(), *web.values()))
    assert "statement_timeout" not in json.dumps(worker)  # the worker's repairs run as long as they need
    assert "statement_timeout" not in json.dumps(web.get("owner", {}))  # nor do migrations
    conninfo = connections["owner"].get_connection_params()
    conninfo = {k: v for k, v in conninfo.items() if k in ("host", "port", "user", "password")}
    conninfo["dbname"] = "postgres"  # any database: the options are the connection's
    with psycopg.connect(**conninfo, options=web["default"]["options"], autocommit=True) as conn:
        start = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(5)")
        assert time.monotonic() - start < 2
    with psycopg.connect(**conninfo, autocommit=True) as conn:  # a worker's connection: not cancelled
        conn.execute("SELECT pg_sleep(1)")


FROZEN_MID_REQUEST = """
import json, os, signal, threading, time
import django
django.setup()
from django.db import connection
from django.test import Client
client = Client()
client.get("/healthz")
connection.ensure_connection()
with connection.cursor() as cursor:
    cursor.execute("SELECT pg_backend_pid()")
    backend = cursor.fetchone()[0]
os.kill(backend, signal.SIGSTOP)  # the server process behind this connection stops answering
thaw = threading.Timer(float(os.environ["THAW_AFTER"]), os.kill, (backend, signal.SIGCONT))
thaw.start()
start = time.monotonic()
answer = client.get("/api/v1/incidents/", HTTP_AUTHORIZATION="Token " + "a" * 40)
took = time.monotonic() - start
thaw.cancel()
os.kill(backend, signal.SIGCONT)
print(json.dumps({"status": answer.status_code, "seconds": took, "retry_after": answer.get("Retry-After"),
                  "body": answer.content.decode()[:500]}))
"""


@pytest.mark.django_db
def test_a_database_that_freezes_under_an_open_connection_costs_a_request_its_deadline_not_the_freeze():
    """The server-side statement_timeout cannot fire in a stopped server: before the watchdog
    (core.db_deadline) the request waited until the server was thawed (THAW_AFTER), then answered."""
    from django.conf import settings

    from tests.helpers import database_url

    owner = settings.DATABASES["owner"]  # over TCP or the embedded server's socket, as the workers reach it
    env = dict(os.environ, DATABASE_URL=database_url(owner, owner["NAME"]), KINTSUGI_PROCESS="web", THAW_AFTER="20",
               KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS="1", DJANGO_SETTINGS_MODULE="kintsugi_site.settings.test")
    done = subprocess.run([sys.executable, "-c", FROZEN_MID_REQUEST], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503 and answer["retry_after"], answer
    assert json.loads(answer["body"])["error"]["code"] == "database_unavailable"
    assert answer["seconds"] < 1 + 2 + POSTGRES_REQUEST_DEADLINE, answer  # the deadline, its grace, a margin
