"""What an operator's probes see, without a login: `/healthz` (the process answers) and `/readyz` (each
dependency, its state and how long it took to answer).

Readiness asks every dependency itself with a short deadline (KINTSUGI_READYZ_TIMEOUT_SECONDS), never
through the application's pooled clients: those wait minutes for a frozen FalkorDB, and a probe that
hangs is read as a dead process. Postgres, each FalkorDB server workspaces are placed on, the broker and
the audit signing key are required (any one down: 503); the outage sweep's freshness is reported but
does not make the web process unready (serving goes on; the healer is what is late, and the metric
kintsugi_sweep_last_run_age_seconds alerts on it)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import redis
from django.conf import settings
from django.db import connections
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from repairs.sweep_marks import sweep_last_run

def _timeout() -> float:
    return float(getattr(settings, "KINTSUGI_READYZ_TIMEOUT_SECONDS", 2.0))


def _timed(check) -> dict:
    start = time.monotonic()
    try:
        detail = check() or {}
        state = "ok"
    except Exception as exc:  # noqa: BLE001 - whatever a dependency raises, the probe reports it
        detail, state = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}, "down"
    return {"state": state, "latency_ms": round((time.monotonic() - start) * 1000, 1), **detail}


def _ping_redis(url: str) -> None:
    t = _timeout()
    client = redis.Redis.from_url(url, socket_timeout=t, socket_connect_timeout=t)
    try:
        client.ping()
    finally:
        client.close()


def check_postgres() -> dict:
    def query():
        with connections["default"].cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    return _timed(query)


def falkordb_servers() -> dict[str, str]:
    """Every FalkorDB server workspaces may live on, placement key → URL (the default one included)."""
    from provenance.graph import falkordb_url, placement_servers, server_key

    servers = dict(placement_servers())
    default = falkordb_url()
    servers.setdefault(server_key(default), default)
    return servers


def check_signer() -> dict:
    from core import checkpoints

    def sign():
        checkpoints.sign(b"readiness probe")
        return {"key": checkpoints.signing_fingerprint()}
    return _timed(sign)


def check_sweep() -> dict:
    last = sweep_last_run()
    if last is None:
        return {"state": "unknown", "required": False, "last_run": None}
    age = max(0.0, time.time() - last)
    stale = age > 3 * settings.KINTSUGI_SWEEP_SECONDS
    return {"state": "stale" if stale else "ok", "required": False, "last_run_age_seconds": round(age, 1)}


def readiness() -> dict:
    """Each dependency's state; `ready` when every required one is ok."""
    checks: dict[str, dict] = {"postgres": check_postgres()}
    try:
        servers = falkordb_servers()
    except Exception as exc:  # noqa: BLE001 - e.g. an embedded server that cannot start
        servers, checks["falkordb"] = {}, {"state": "down", "latency_ms": 0, "error": str(exc)}
    from provenance.graph import server_label

    remote = {f"falkordb:{key}": url for key, url in servers.items()}
    remote["broker"] = settings.CELERY_BROKER_URL
    with ThreadPoolExecutor(max_workers=len(remote)) as pool:
        futures = {name: pool.submit(_timed, lambda u=url: _ping_redis(u)) for name, url in remote.items()}
    for name, future in futures.items():
        checks[name] = future.result()
        checks[name]["server"] = server_label(remote[name])
    checks["audit_signer"] = check_signer()
    checks["sweep"] = check_sweep()
    ready = all(c["state"] == "ok" for c in checks.values() if c.get("required", True))
    return {"ready": ready, "checks": checks}


@never_cache
@require_GET
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


@never_cache
@require_GET
def readyz(request):
    body = readiness()
    return JsonResponse(body, status=200 if body["ready"] else 503)
