"""The part of `bench multihost` that runs on the web host (inside its network namespace), as an
operator's and a support lead's session would: migrate, create the lead and an API token, record the
desks, flag the poisoned page of each workspace over HTTP through the production server, and watch the
repairs. It reports JSON lines on stdout to the orchestrator (bench.multihost) and, when a repair is
under way, names the worker host that holds it (the address of the Postgres session holding that
repair's lock) and waits for the orchestrator to kill that host before it watches the rest.

Configuration comes from the environment the orchestrator sets (MULTIHOST_*); the app's own settings
are the production settings with real service URLs on the test hosts' addresses.
"""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

POISONED = "partner-blog/policy-update"


def emit(event: str, **data) -> None:
    print(json.dumps({"event": event, "t": time.time(), **data}, default=str), flush=True)


def _http(method: str, url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json",
                                              "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, _json(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _json(exc.read())


def _json(raw: bytes):
    try:
        return json.loads(raw or b"{}")
    except json.JSONDecodeError:
        return {"text": raw[:200].decode(errors="replace")}


def _ensure_database(owner_url: str) -> None:
    import psycopg
    from psycopg import sql

    base, _, name = owner_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=10) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup() -> str:
    """Database, migrations, the support lead and its API token; returns the token."""
    _ensure_database(os.environ["DATABASE_OWNER_URL"])
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from provenance.access.tenancy import OPERATOR_VIA
    from provenance.access.tokens import issue_api_token

    call_command("migrate", verbosity=0, interactive=False)
    user = get_user_model().objects.create_superuser("mh-lead", password=os.urandom(16).hex())
    # The key as issued (the token's row keeps only its digest), as the operator's command line issues it.
    return issue_api_token(user=user, actor=None, reason="multi-host run", via=OPERATOR_VIA)[1]


def record(workspaces: list[str], tickets: int) -> dict:
    from provenance.models import Workspace
    from provenance.recording.services import desk_run

    for seed, name in enumerate(workspaces, start=1):
        desk_run(workspace=name, tickets=tickets, seed=seed, reason="multi-host run",
                 progress=lambda done, total, name=name: emit("progress", workspace=name, done=done, total=total)
                 if done == total or done % 200 == 0 else None)
    return {ws.name: {"server": ws.falkordb_server, "actions": ws.action_count}
            for ws in Workspace.objects.filter(name__in=workspaces)}


def wait_for_web(base: str, token: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            status = _http("GET", f"{base}/api/v1/workspaces/", token)[0]
        except OSError:
            status = None
        if status == 200:
            return
        if status in (401, 403):  # it answers, and waiting will not change its mind
            raise RuntimeError(f"the web server at {base} refused the lead's API token ({status})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the web server at {base} did not answer within {timeout:.0f}s")
        time.sleep(0.5)


def flag(base: str, token: str, workspaces: list[str]) -> dict[str, int]:
    from provenance.models import Source

    incidents = {}
    for name in workspaces:
        source = Source.objects.get(workspace__name=name, source_id=POISONED)
        status, body = _http("POST", f"{base}/api/v1/sources/{source.pk}/flag/", token,
                             {"reason": "poisoned page (multi-host run)"})
        if status != 201:
            raise RuntimeError(f"flagging {POISONED} in {name} answered {status}: {body}")
        incidents[name] = body["id"]
    return incidents


def _lock_holders(incident_ids: list[int]) -> dict[int, str]:
    """incident id → address of the Postgres client holding its repair lock (the worker host)."""
    from django.db import connections

    from core import locks

    with connections["owner"].cursor() as cur:
        cur.execute("SELECT l.objid, host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.granted AND l.objid = ANY(%s)",
                    [locks.REPAIR, incident_ids])
        return {int(objid): addr for objid, addr in cur.fetchall()}


def watch(incidents: dict[str, int], hosts_by_address: dict[str, str], timeout: float) -> dict:
    from repairs.models import Incident

    ids = list(incidents.values())
    killed, flagged_at, ended_at = None, time.monotonic(), {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = {i.pk: i for i in Incident.objects.filter(pk__in=ids)}
        if killed is None:
            holders = _lock_holders([pk for pk, i in rows.items() if i.status == "repairing"])
            for pk, addr in holders.items():
                inc = rows[pk]
                # Well into the repair: a third of the walk done, or its plan checkpointed and being applied.
                if inc.phase in ("applying", "verifying") or (
                        inc.phase == "walking" and inc.progress_total and inc.progress_done * 3 >= inc.progress_total):
                    killed = {"host": hosts_by_address.get(addr, addr), "incident": pk, "phase": inc.phase,
                              "progress": [inc.progress_done, inc.progress_total]}
                    emit("kill", **killed)
                    if sys.stdin.readline().strip() != "killed":
                        raise RuntimeError("the orchestrator did not confirm the kill")
                    emit("killed", **killed)
                    break
        for pk, i in rows.items():
            if i.status in ("repaired", "failed"):
                ended_at.setdefault(pk, time.monotonic() - flagged_at)
        if all(i.status in ("repaired", "failed") for i in rows.values()):
            if killed is None:
                raise RuntimeError("every repair ended before a worker host could be killed mid-repair; "
                                   "record more tickets")
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"repairs not finished within {timeout:.0f}s")
    out = {}
    for name, pk in incidents.items():
        inc = Incident.objects.select_related("workspace").get(pk=pk)
        v = inc.verification or {}
        out[name] = {"incident": pk, "server": inc.workspace.falkordb_server, "status": inc.status,
                     "blast_radius": inc.blast_radius, "attempts": inc.attempts, "counts": inc.counts,
                     "verification": [v.get("facts"), v.get("decisions"), v.get("effects")],
                     "flag_to_repaired_s": round(ended_at.get(pk, float("nan")), 1), "error": inc.error[:200]}
    return {"killed": killed, "incidents": out}


def main() -> int:
    workspaces = os.environ["MULTIHOST_WORKSPACES"].split(",")
    base, hosts = os.environ["MULTIHOST_WEB_URL"], json.loads(os.environ["MULTIHOST_HOSTS"])
    emit("phase", name="migrate")
    token = setup()
    emit("phase", name="record")
    placed = record(workspaces, int(os.environ["MULTIHOST_TICKETS"]))
    emit("recorded", workspaces=placed)
    wait_for_web(base, token)
    emit("phase", name="flag")
    incidents = flag(base, token, workspaces)
    emit("flagged", incidents=incidents)
    result = watch(incidents, hosts, float(os.environ.get("MULTIHOST_TIMEOUT", "600")))
    emit("phase", name="done")
    emit("result", **result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator, which cleans up
        emit("error", message=f"{type(exc).__name__}: {exc}"[:500])
        sys.exit(1)
