"""/healthz, /readyz and /metrics: what an operator's probes and scraper see, without a login."""
from __future__ import annotations

import json
import socket

import pytest

from repairs.sweep_marks import record_sweep_run
from tests.helpers import flag_and_repair, flagger


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"  # nothing listens there once the socket is closed


def test_healthz_answers_without_login(client):
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_readyz_names_each_dependency_with_state_and_latency(client, falkordb_url):
    record_sweep_run()
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = json.loads(response.content)
    checks = body["checks"]
    assert body["ready"] is True
    assert {"postgres", "broker", "audit_signer", "sweep"} <= set(checks)
    assert [k for k in checks if k.startswith("falkordb:")], checks
    for name in ("postgres", "broker", "audit_signer"):
        assert checks[name]["state"] == "ok" and checks[name]["latency_ms"] >= 0
    assert checks["sweep"]["state"] == "ok" and checks["sweep"]["last_run_age_seconds"] < 60


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_away(client, settings):
    settings.CELERY_BROKER_URL = _dead_url()
    response = client.get("/readyz")
    assert response.status_code == 503
    body = json.loads(response.content)
    assert body["checks"]["broker"]["state"] == "down" and body["checks"]["broker"]["error"]
    assert body["checks"]["postgres"]["state"] == "ok"


@pytest.mark.django_db
def test_readyz_names_each_falkordb_server_and_the_one_that_is_down(client, settings, falkordb_url):
    dead = _dead_url()
    settings.KINTSUGI_FALKORDB_URLS = [falkordb_url, dead]
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = json.loads(response.content)["checks"]
    states = {k: v["state"] for k, v in checks.items() if k.startswith("falkordb:")}
    assert sorted(states.values()) == ["down", "ok"], states


@pytest.mark.django_db
def test_readyz_is_503_without_a_usable_signing_key(client, settings, tmp_path):
    settings.KINTSUGI_AUDIT_SIGNING_KEY = str(tmp_path / "absent.pem")
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True
    response = client.get("/readyz")
    assert response.status_code == 503
    assert json.loads(response.content)["checks"]["audit_signer"]["state"] == "down"


@pytest.mark.django_db
def test_a_stale_sweep_is_reported_but_does_not_make_the_web_unready(client, settings):
    from django.core.cache import cache

    from repairs.sweep_marks import SWEEP_LAST_RUN_KEY
    import time

    cache.set(SWEEP_LAST_RUN_KEY, time.time() - 10 * settings.KINTSUGI_SWEEP_SECONDS)
    response = client.get("/readyz")
    assert response.status_code == 200
    assert json.loads(response.content)["checks"]["sweep"]["state"] == "stale"


@pytest.mark.django_db
def test_metrics_from_loopback_count_incidents_and_pending_review(client):
    from provenance.recording.services import desk_run

    desk_run(workspace="ops-metrics")
    flag_and_repair("ops-metrics", actor=flagger())
    text = client.get("/metrics").content.decode()
    assert 'kintsugi_incidents{status="repaired",workspace="ops-metrics"} 1.0' in text
    assert 'kintsugi_incidents{status="blocked",workspace="ops-metrics"} 0.0' in text
    pending = [l for l in text.splitlines() if l.startswith('kintsugi_review_items_pending{workspace="ops-metrics"}')]
    assert pending and float(pending[0].split()[-1]) > 0, pending
    amount = [l for l in text.splitlines()
              if l.startswith('kintsugi_review_items_pending_amount_cents{workspace="ops-metrics"}')]
    assert amount and float(amount[0].split()[-1]) > 0
    # The repair's notice is owed: nothing committed here, so its task was never sent.
    assert "kintsugi_review_notices_owed 1.0" in text
    for name in ("kintsugi_incidents_blocked_oldest_age_seconds", "kintsugi_sweep_runs_total",
                 "kintsugi_celery_queue_depth{queue=\"celery\"}", "kintsugi_recorded_actions",
                 "kintsugi_delivery_failures", "kintsugi_audit_checkpoint_lag_seconds",
                 "kintsugi_repair_duration_seconds_count"):
        assert any(line.startswith(name) for line in text.splitlines()), name


@pytest.mark.django_db
def test_metrics_off_loopback_need_the_bearer_token(client, settings):
    settings.KINTSUGI_METRICS_TOKEN = "s3cret-scrape-token"
    far = {"REMOTE_ADDR": "10.1.2.3"}
    assert client.get("/metrics", **far).status_code == 401
    # A forwarded header naming loopback is what the client claims, not where it is.
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1", **far).status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", **far).status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token", **far)
    assert ok.status_code == 200 and b"kintsugi_incidents" in ok.content


@pytest.mark.django_db
@pytest.mark.parametrize("header", ["HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_VIA"])
def test_metrics_from_loopback_through_a_proxy_need_the_bearer_token(client, settings, header):
    """Behind a proxy on the same host every client arrives from 127.0.0.1: the red case is any client of
    the proxy reading the metrics with no token, its forwarded header ignored (no proxy is trusted)."""
    settings.KINTSUGI_METRICS_TOKEN = "s3cret-scrape-token"
    forwarded = {"REMOTE_ADDR": "127.0.0.1", header: "198.51.100.7"}
    refused = client.get("/metrics", **forwarded)
    assert refused.status_code == 401 and b"kintsugi_incidents" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token", **forwarded).status_code == 200
    settings.KINTSUGI_METRICS_TOKEN = ""
    assert client.get("/metrics", **forwarded).status_code == 401  # no token set: loopback without a proxy only
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200


@pytest.mark.django_db
def test_metrics_off_loopback_are_closed_when_no_token_is_configured(client, settings):
    settings.KINTSUGI_METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_unsigned_audit_rows_show_as_checkpoint_lag_until_signed(client, transactional_db, monkeypatch):
    from core.audit import chains, checkpoints
    from provenance.recording.services import desk_run, get_workspace

    monkeypatch.setattr(checkpoints, "after_commit", lambda **kw: None)  # a signer that has fallen behind
    desk_run(workspace="ops-lag")
    flag_and_repair("ops-lag", actor=flagger())
    chain = chains.chain_label(get_workspace("ops-lag").pk)

    def figure(name):
        text = client.get("/metrics").content.decode()
        line = next(l for l in text.splitlines() if l.startswith(f'{name}{{chain="{chain}"}}'))
        return float(line.split()[-1])

    assert figure("kintsugi_audit_unsigned_rows") > 0 and figure("kintsugi_audit_checkpoint_lag_seconds") >= 0
    checkpoints.sign_heads([get_workspace("ops-lag").pk])
    assert figure("kintsugi_audit_unsigned_rows") == 0 and figure("kintsugi_audit_checkpoint_lag_seconds") == 0
