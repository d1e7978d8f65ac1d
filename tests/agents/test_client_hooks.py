"""The Python client as an outside developer meets it: serve_replays' verify and log hooks see each signed
replay's purpose and headers, Desk.replay's client is theirs to observe, the replay secret survives a
restart without a rotation, and rate limits (429 with Retry-After) are waited out within a bound."""
import json
import os
import stat
import time
import urllib.error
import urllib.request

import pytest
from django.contrib.auth import get_user_model

from compensation.models import AuditEvent
from kintsugi_client import Client, Desk, ForgedReplay, KintsugiError
from kintsugi_client.replay_secret import ENV, keep_replay_secret, load_replay_secret
from kintsugi_client.signing import sign
from provenance.models import AgentRegistration, Source, Workspace
from provenance.access.onboarding import register_agent
from repairs.job import run_repair
from tests.agents.writer_reader import record_writer_reader
from tests.helpers import api_key, create_user, free_port, open_incident

pytestmark = pytest.mark.django_db(transaction=True)


class Calls(Client):
    """The developer's own client for replays: it notes every call the agent makes."""

    def __init__(self, *args, seen: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = seen

    def call(self, action, op, body):
        self.seen.append(op)
        return super().call(action, op, body)


@pytest.fixture
def hooked_desk():
    """writer ingests kb/page and writes `policy`; reader reads it. The desk serves both agents' replays
    with hooks."""
    admin = get_user_model().objects.create_superuser("root", "r@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="hooks")
    Source.objects.create(workspace=ws, source_id="kb/page", content="refunds: 30 days")
    secrets = {a: register_agent(workspace=ws, name=a, replay="http://127.0.0.1:9/replay", timeout_seconds=10,
                                 actor=admin, reason="t", via="cli")[0].replay_secret for a in ("writer", "reader")}
    events, verified, calls = [], [], []
    desk = Desk(Client("http://127.0.0.1:9", ""), replay_secret=secrets,
                replay_client=lambda base_url, token: Calls(base_url, token, seen=calls))

    @desk.agent("writer")
    def writer(rec, payload):
        content = rec.ingest(payload["source"])
        if content:
            rec.set("policy", content)
        return {"wrote": bool(content)}

    @desk.agent("reader")
    def reader(rec, payload):
        return {"choice": "refund" if rec.get("policy") else "escalate", "level": "none"}

    def verify(request, headers):
        verified.append((request["purpose"], sorted(k.lower() for k in headers if k.lower().startswith("x-kintsugi"))))
        if request["purpose"] == "what_if":
            raise ForgedReplay("this desk serves no what-if")

    port = free_port()
    server = desk.serve_replays("127.0.0.1", port, block=False, verify=verify, log=events.append)
    AgentRegistration.objects.filter(workspace=ws).update(replay_url=f"http://127.0.0.1:{port}/replay")
    record_writer_reader(ws, admin, value="refunds: 30 days", decision={"choice": "refund", "level": "none"})
    yield ws, secrets, port, events, verified, calls
    server.shutdown()
    server.server_close()


def test_hooks_see_each_real_replay_and_its_calls_go_through_the_developers_client(hooked_desk):
    ws, _, _, events, verified, calls = hooked_desk
    incident = run_repair(incident_id=open_incident(ws.name, "kb/page").pk)
    assert incident.status == "repaired", incident.error
    # The writer's digest of the flagged page is re-run first (the page answering None), then the reader,
    # in the repair and again in its verification's clean baseline.
    assert [p for p, _ in verified] == ["repair", "repair", "verification", "verification"]
    assert all(h == ["x-kintsugi-signature", "x-kintsugi-timestamp"] for _, h in verified)
    assert [(e["outcome"], e["purpose"], e["agent"], e["status"]) for e in events] == [
        ("ran", "repair", "writer", 200), ("ran", "repair", "reader", 200),
        ("ran", "verification", "writer", 200), ("ran", "verification", "reader", 200)]
    assert all(e["replay_id"] and e["headers"] and "token" not in json.dumps(e) for e in events)
    # Observed through the client the desk was given.
    assert calls == ["ingest", "finish", "get", "finish"] * 2


def _post(port: int, body: bytes, headers: dict) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/replay", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_verify_hook_refuses_a_purpose_before_the_agent_runs_and_the_log_hears_every_refusal(hooked_desk):
    ws, secrets, port, events, verified, calls = hooked_desk
    body = json.dumps({"workspace": ws.name, "agent": "reader", "action": 2, "payload": {"ticket": "t1"},
                       "mode": "replay", "purpose": "what_if", "replay_id": "w-1", "base_url": "http://127.0.0.1:9",
                       "token": "replay-token"}).encode()
    ts, signature = sign(body, secrets["reader"])
    assert _post(port, body, {"X-Kintsugi-Timestamp": str(ts), "X-Kintsugi-Signature": signature}) == 401
    assert _post(port, body, {}) == 401  # unsigned: refused before the verify hook is asked
    assert verified == [("what_if", ["x-kintsugi-signature", "x-kintsugi-timestamp"])] and calls == []
    assert [(e["outcome"], e["status"], e["purpose"]) for e in events] == [("refused", 401, "what_if"),
                                                                           ("refused", 401, None)]
    assert "this desk serves no what-if" in events[0]["error"] and "replay-token" not in json.dumps(events)


def test_a_restarted_desk_keeps_its_replay_secret_without_a_rotation(live_server, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    admin = create_user("wsadmin", "Workspace admin")
    client = Client(live_server.url, api_key(admin))
    ws = client.ensure_workspace("kept", reason="a desk")["id"]
    path = tmp_path / "secrets" / "desk_triage.krs"
    first = keep_replay_secret(client, ws, "desk_triage", "http://127.0.0.1:9100/replay", path=path, reason="start")
    assert first.startswith("krs_") and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # The restart: the registration is re-pointed, the secret read back, nothing rotated.
    again = keep_replay_secret(client, ws, "desk_triage", "http://127.0.0.1:9200/replay", path=path, reason="restart")
    registration = AgentRegistration.objects.get(workspace_id=ws, name="desk_triage")
    assert again == first == registration.replay_secret and registration.replay_url.endswith(":9200/replay")
    assert not AuditEvent.objects.filter(action__contains="rotat").exists()
    monkeypatch.setenv(ENV, first)  # a secret store that injects it instead of a file
    path.unlink()
    assert keep_replay_secret(client, ws, "desk_triage", "http://127.0.0.1:9200/replay", path=path, reason="r") == first
    # The red case of a lost secret: rotated once, and the new one kept.
    monkeypatch.delenv(ENV)
    rotated = keep_replay_secret(client, ws, "desk_triage", "http://127.0.0.1:9200/replay", path=path, reason="lost")
    assert rotated != first and load_replay_secret(path) == rotated
    assert AgentRegistration.objects.get(workspace_id=ws, name="desk_triage").replay_secret == rotated


@pytest.fixture
def throttled(live_server, settings):
    def rate(value: str):
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "blast_radius": value}}
        ws = Workspace.objects.create(name=f"rates-{value.replace('/', '-')}")
        source = Source.objects.create(workspace=ws, source_id="kb/page", content="x")
        lead = create_user(f"lead-{ws.pk}", "Support lead", workspaces=[ws])
        return f"/api/v1/sources/{source.pk}/blast-radius/", api_key(lead)
    return lambda value: (live_server.url, *rate(value))


def test_the_client_waits_out_a_429_within_its_bound(throttled):
    url, path, key = throttled("1/s")
    client = Client(url, key, max_wait=5)
    client.request("GET", path)
    started = time.monotonic()
    # The red case before: the second call within the second raised KintsugiError 429 at once.
    assert client.request("GET", path)["size"] == 0
    assert 0.3 < time.monotonic() - started < 5


def test_a_429_asking_longer_than_the_bound_is_raised_at_once(throttled):
    url, path, key = throttled("1/min")
    client = Client(url, key, max_wait=5)
    client.request("GET", path)
    started = time.monotonic()
    with pytest.raises(KintsugiError) as caught:
        client.request("GET", path)
    assert caught.value.status == 429 and caught.value.retry_after > 5 and time.monotonic() - started < 2
