"""Replay requests are signed with the agent registration's secret and say why they run: the Python
client runs a real signed replay and refuses (401, before any agent code) a forged, stale, replayed or
unsigned one; the secret is shown once, rotated with an audit row that never holds it."""
import io
import json
import time
import urllib.error
import urllib.request

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from compensation.models import AuditEvent
from kintsugi_client import Client, Desk
from kintsugi_client.signing import ForgedReplay, SeenReplays, sign, verify, verify_request
from provenance.recording import replay as server_replay
from provenance.models import AgentRegistration, Source, Workspace
from provenance.access.onboarding import register_agent
from repairs.job import run_repair
from repairs.what_if import compute_what_if
from tests.agents.writer_reader import record_writer_reader
from tests.helpers import client_for, free_port, open_incident

SECRET = "krs_test-secret"


# --- the signing itself (no database) -------------------------------------------------------------------
def test_a_body_signed_by_the_server_verifies_with_the_client_module():
    body = b'{"replay_id": "r1", "agent": "a"}'
    ts = int(time.time())
    assert verify(body, str(ts), server_replay.sign(body, SECRET, ts), SECRET) == ts
    assert sign(body, SECRET, ts) == (ts, server_replay.sign(body, SECRET, ts))


@pytest.mark.parametrize("broken", ["signature", "body", "secret", "stale", "future", "missing", "not_a_number"])
def test_a_forged_or_stale_or_unsigned_request_is_refused(broken):
    body = b'{"replay_id": "r1"}'
    ts, signature = sign(body, SECRET)
    args = {"signature": (body, ts, signature[:-1] + ("0" if signature[-1] != "0" else "1"), SECRET),
            "body": (body + b" ", ts, signature, SECRET),
            "secret": (body, ts, signature, SECRET + "x"),
            "stale": (body, ts, signature, SECRET),
            "future": (body, ts, signature, SECRET),
            "missing": (body, None, signature, SECRET),
            "not_a_number": (body, "yesterday", signature, SECRET)}[broken]
    now = {"stale": ts + 301, "future": ts - 301}.get(broken)
    with pytest.raises(ForgedReplay):
        verify(*args, now=now)
    assert verify(body, ts, signature, SECRET, now=ts + 300) == ts  # the edge of the window still holds


def test_the_same_replay_id_is_accepted_once():
    body = b'{"replay_id": "once"}'
    ts, signature = sign(body, SECRET)
    headers = {"x-kintsugi-timestamp": str(ts), "X-Kintsugi-Signature": signature}
    seen = SeenReplays()
    assert verify_request(body, headers, SECRET, seen=seen)["replay_id"] == "once"
    with pytest.raises(ForgedReplay, match="already seen"):
        verify_request(body, headers, SECRET, seen=seen)
    unsigned = b'{"replay_id": "never-spent"}'
    with pytest.raises(ForgedReplay):
        verify_request(unsigned, headers, SECRET, seen=seen)
    assert "never-spent" not in seen._seen  # a forged request does not use up a real id


# --- over HTTP, with a real repair ------------------------------------------------------------------------
class SigningDesk:
    """kintsugi_client.Desk serving replays on a real port, noting each request its agents ran."""

    def __init__(self, secret):
        self.runs: list[dict] = []
        self.desk = Desk(Client("http://127.0.0.1:9", ""), replay_secret=secret)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/replay"
        desk, runs = self.desk, self.runs
        original = desk.replay

        def noted(request):
            runs.append(request)
            return original(request)

        desk.replay = noted

        @desk.agent("writer")
        def writer(rec, payload):
            content = rec.ingest(payload["source"])
            if content:
                rec.set("policy", content)
            return {"wrote": bool(content)}

        @desk.agent("reader")
        def reader(rec, payload):
            policy = rec.get("policy")
            return {"choice": "refund" if policy else "escalate", "level": "none"}

    def start(self):
        self.server = self.desk.serve_replays("127.0.0.1", self.port, block=False)
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def signed_workspace():
    """writer ingests kb/page and writes `policy`; reader reads it: flagging kb/page re-runs the writer (the
    page answering None, it writes nothing and is masked) and then the reader."""
    def make(name: str):
        admin = get_user_model().objects.create_superuser(f"{name}-root", "r@example.com", "pass-1234-kintsugi")
        ws = Workspace.objects.create(name=name)
        Source.objects.create(workspace=ws, source_id="kb/page", content="refunds: 30 days")
        Source.objects.create(workspace=ws, source_id="kb/other", content="shipping: 3 days")
        secrets = {}
        for a in ("writer", "reader"):
            reg, _ = register_agent(workspace=ws, name=a, replay="http://127.0.0.1:9/replay", timeout_seconds=10,
                                    actor=admin, reason="t", via="cli")
            secrets[a] = reg.replay_secret  # each registration's own, as the registration answered it
        desk = SigningDesk(secrets)
        AgentRegistration.objects.filter(workspace=ws).update(replay_url=desk.url)
        assert record_writer_reader(ws, admin, value="refunds: 30 days", decision={"choice": "refund", "level": "none"})
        return ws, desk.start()

    desks = []
    yield lambda name: desks.append(make(name)) or desks[-1]
    for _, desk in desks:
        desk.stop()


@pytest.mark.django_db(transaction=True)
def test_a_signed_replay_is_accepted_and_says_it_is_a_repair_or_its_verification(signed_workspace):
    ws, desk = signed_workspace("signed")
    incident = run_repair(incident_id=open_incident(ws.name, "kb/page").pk)
    assert incident.status == "repaired", incident.error
    # The repair re-runs the writer with the flagged page answering None (it writes nothing, so it is masked),
    # then the reader; the verification's clean baseline runs both the same way.
    assert [(r["agent"], r["purpose"]) for r in desk.runs] == [
        ("writer", "repair"), ("reader", "repair"), ("writer", "verification"), ("reader", "verification")]
    assert incident.counts["poisoned"] == 1 and incident.counts["rerun_changed"] == 1
    assert len({r["replay_id"] for r in desk.runs}) == len(desk.runs)


@pytest.mark.django_db(transaction=True)
def test_a_what_if_replay_says_it_is_a_what_if(signed_workspace):
    ws, desk = signed_workspace("signed-wif")
    compute_what_if(workspace=ws, source="kb/page")
    # The writer re-runs first, the flagged page answering None, then the reader it fed: both as a what-if.
    assert [(r["agent"], r["purpose"]) for r in desk.runs] == [("writer", "what_if"), ("reader", "what_if")]


def _post(url: str, body: bytes, headers: dict) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_the_python_client_refuses_unsigned_forged_stale_and_replayed_requests_before_any_agent_runs(signed_workspace):
    ws, desk = signed_workspace("signed-red")
    secret = AgentRegistration.objects.get(workspace=ws, name="reader").replay_secret
    request = {"workspace": ws.name, "agent": "reader", "action": 2, "payload": {"ticket": "t1"}, "mode": "replay",
               "purpose": "repair", "replay_id": "r-1", "base_url": "http://127.0.0.1:9", "token": "x"}
    body = json.dumps(request).encode()
    ts, signature = sign(body, secret)
    good = {"X-Kintsugi-Timestamp": str(ts), "X-Kintsugi-Signature": signature}
    assert _post(desk.url, body, {}) == 401
    assert _post(desk.url, body, {"X-Kintsugi-Timestamp": str(ts)}) == 401
    assert _post(desk.url, body, good | {"X-Kintsugi-Signature": sign(body, secret + "x", ts)[1]}) == 401
    old_ts, old_signature = sign(body, secret, ts - 301)
    assert _post(desk.url, body, {"X-Kintsugi-Timestamp": str(old_ts), "X-Kintsugi-Signature": old_signature}) == 401
    assert _post(desk.url, body.replace(b"t1", b"t9"), good) == 401
    assert desk.runs == []  # no agent code ran for any of them
    # The genuine request reaches the agent (which then fails to reach the made-up callback: 500)...
    assert _post(desk.url, body, good) == 500 and len(desk.runs) == 1
    # ...and the very same signed request sent again is refused.
    assert _post(desk.url, body, good) == 401 and len(desk.runs) == 1


def test_a_desk_without_a_replay_secret_does_not_serve_replays():
    with pytest.raises(ValueError, match="replay_secret"):
        Desk(Client("http://127.0.0.1:9", "")).serve_replays("127.0.0.1", free_port(), block=False)


# --- the secret: shown once, rotated with an audit row that never holds it ---------------------------
@pytest.mark.django_db(transaction=True)
def test_the_replay_secret_is_printed_once_and_rotated_with_an_audit_row_that_never_holds_it():
    get_user_model().objects.create_superuser("root", "r@example.com", "pass-1234-kintsugi")
    call_command("onboard", "workspace", "--name", "sec", "--user", "root", "--reason", "r", stdout=io.StringIO())
    common = ["--workspace", "sec", "--name", "far_agent", "--user", "root", "--reason", "r"]
    out = io.StringIO()
    call_command("onboard", "agent", *common, "--replay-url", "http://127.0.0.1:9/replay", stdout=out)
    secret = AgentRegistration.objects.get(name="far_agent").replay_secret
    assert secret.startswith("krs_") and len(secret) > 40 and secret in out.getvalue()
    again = io.StringIO()
    call_command("onboard", "agent", *common, "--replay-url", "http://127.0.0.1:9/other", stdout=again)
    assert "krs_" not in again.getvalue()
    assert AgentRegistration.objects.get(name="far_agent").replay_secret == secret  # re-pointing keeps it
    rotated = io.StringIO()
    call_command("onboard", "agent", *common, "--rotate-secret", "--json", stdout=rotated)
    new = AgentRegistration.objects.get(name="far_agent").replay_secret
    assert new != secret and json.loads(rotated.getvalue())["replay_secret"] == new
    row = AuditEvent.objects.get(action="agent.secret_rotated")
    assert secret not in json.dumps(row.data) and new not in json.dumps(row.data) and new not in row.reason
    registered = AuditEvent.objects.get(action="agent.registered")
    assert secret not in json.dumps(registered.data)


@pytest.mark.django_db(transaction=True)
def test_the_api_answers_the_secret_only_when_registering_and_rotating(make_user, settings):
    admin = make_user("wsadmin-sec", roles=["Workspace admin"])
    api = client_for(admin)
    ws_id = api.post("/api/v1/workspaces/", {"name": "sec-api", "reason": "r"}, format="json").json()["id"]
    body = {"name": "far_agent", "replay_url": "http://127.0.0.1:9/replay", "reason": "r"}
    settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8"]
    first = api.post(f"/api/v1/workspaces/{ws_id}/agents/", body, format="json").json()
    assert first["replay_secret"].startswith("krs_")
    assert "replay_secret" not in api.post(f"/api/v1/workspaces/{ws_id}/agents/", body, format="json").json()
    assert "replay_secret" not in api.get(f"/api/v1/workspaces/{ws_id}/agents/").json()[0]
    rotated = api.post(f"/api/v1/workspaces/{ws_id}/agents/far_agent/rotate-secret/", {"reason": "leaked"},
                       format="json")
    assert rotated.status_code == 200 and rotated.json()["replay_secret"] not in ("", first["replay_secret"])
    assert AgentRegistration.objects.get(name="far_agent").replay_secret == rotated.json()["replay_secret"]
    assert api.post(f"/api/v1/workspaces/{ws_id}/agents/nobody/rotate-secret/", {"reason": "r"},
                    format="json").status_code == 404
