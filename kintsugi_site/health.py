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
from concurrent.futures import TimeoutError as FuturesTimeout

import redis
from django.conf import settings
from django.db import connections
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from repairs.sweep_marks import sweep_last_run

def _timeout() -> float:
    return float(getattr(settings, "KINTSUGI_READYZ_TIMEOUT_SECONDS", 1.5))


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
    from provenance.graph.graph import falkordb_url, placement_servers, server_key

    servers = dict(placement_servers())
    default = falkordb_url()
    servers.setdefault(server_key(default), default)
    return servers


def check_signer() -> dict:
    from core.audit import keys

    def sign():
        keys.sign(b"readiness probe")
        return {"key": keys.signing_fingerprint()}
    return _timed(sign)


def check_sweep() -> dict:
    last = sweep_last_run()
    if last is None:
        return {"state": "unknown", "required": False, "last_run": None}
    age = max(0.0, time.time() - last)
    stale = age > 3 * settings.KINTSUGI_SWEEP_SECONDS
    return {"state": "stale" if stale else "ok", "required": False, "last_run_age_seconds": round(age, 1)}


def _sweep() -> dict:
    try:
        return check_sweep()
    except Exception as exc:  # noqa: BLE001 - its mark lives in the cache, on the broker's server
        return {"state": "unknown", "required": False, "error": type(exc).__name__}


def _late(timeout: float) -> dict:
    return {"state": "down", "latency_ms": round(timeout * 1000, 1), "error": f"no answer within {timeout:g} s"}


def readiness() -> dict:
    """Each dependency's state; `ready` when every required one is ok. Answered within the probe's
    deadline whatever the dependencies do: each is asked in a thread of its own, and one that has not
    answered by then is reported down, named, while its thread finishes (or times out) on its own."""
    timeout = _timeout()
    deadline = time.monotonic() + timeout
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="readyz")
    try:
        futures = {"postgres": pool.submit(_closing(check_postgres)),
                   "broker": pool.submit(_timed, lambda: _ping_redis(settings.CELERY_BROKER_URL)),
                   "audit_signer": pool.submit(_closing(check_signer)), "sweep": pool.submit(_sweep)}
        servers, graph_error = _graph_servers(pool, deadline)
        checks = {} if graph_error is None else {"falkordb": graph_error}
        from provenance.graph.graph import server_label

        for key, url in servers.items():
            futures[f"falkordb:{key}"] = pool.submit(_timed, lambda u=url: _ping_redis(u))
        for name, future in futures.items():
            try:
                checks[name] = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FuturesTimeout:
                checks[name] = _late(timeout) if name != "sweep" else {"state": "unknown", "required": False}
        for name, url in [("broker", settings.CELERY_BROKER_URL)] + [(f"falkordb:{k}", u) for k, u in servers.items()]:
            checks[name]["server"] = server_label(url)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    ready = all(c["state"] == "ok" for c in checks.values() if c.get("required", True))
    return {"ready": ready, "checks": checks}


def _closing(check):
    """`check` in a pool thread: whatever connection it opened is closed when it ends."""
    def run():
        try:
            return check()
        finally:
            connections.close_all()
    return run


def _graph_servers(pool: ThreadPoolExecutor, deadline: float) -> tuple[dict[str, str], dict | None]:
    """The FalkorDB servers to ask, or the error saying why there are none to ask (the default one may
    be an embedded server that is still starting)."""
    future = pool.submit(_closing(falkordb_servers))
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic())), None
    except FuturesTimeout:
        return {}, {"state": "down", "latency_ms": 0, "error": "the servers to ask were not known in time (starting)"}
    except Exception as exc:  # noqa: BLE001 - e.g. an embedded server that cannot start
        return {}, {"state": "down", "latency_ms": 0, "error": str(exc)}


@never_cache
@require_GET
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


@never_cache
@require_GET
def readyz(request):
    body = readiness()
    return JsonResponse(body, status=200 if body["ready"] else 503)
