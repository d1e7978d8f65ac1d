"""What an agent author reads as a promise holds: a 409 that passes says how soon to retry in seconds that
match its message, and `flag_source --wait --timeout` gives up (exit 1, with the reason) on a repair its
agent refuses or that no worker runs, instead of hanging or claiming a usage error."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from rest_framework.test import APIClient

from kintsugi_client.signing import verify
from kintsugi_site.api.errors import exception_handler
from provenance.models import AgentRegistration, Source, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import WorkspaceBusy, workspace_lock
from tests.helpers import run_command

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_busy_workspace_answers_409_with_a_retry_after_of_seconds_that_its_message_names():
    ws = Workspace.objects.create(name="busy")
    held, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                workspace_lock(ws)
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        with pytest.raises(WorkspaceBusy) as caught, transaction.atomic():
            workspace_lock(ws, wait_seconds=0.2)
    finally:
        release.set()
        thread.join(10)
    response = exception_handler(caught.value, {})
    error = response.data["error"]
    assert response.status_code == 409 and error["code"] == "workspace_busy"
    assert error["details"] == {"retry_after": 5} and response["Retry-After"] == "5"
    assert "try again in 5 s" in error["message"]


def test_flag_source_wait_gives_up_with_exit_1_when_no_worker_takes_the_repair(capsys, dead_broker, lead):
    ws = Workspace.objects.create(name="no-worker")
    Source.objects.create(workspace=ws, source_id="kb/a", content="Returns within 30 days.")
    started = time.monotonic()
    with dead_broker():
        code, out = run_command(capsys, "flag_source", "--workspace", "no-worker", "--source", "kb/a", "--reason", "r",
                                "--user", lead.username, "--wait", "--timeout", "1", "--json")
    assert code == 1 and time.monotonic() - started < 10
    assert json.loads(out[out.index("{"):out.rindex("}") + 1])["status"] == "blocked"
    assert "gave up waiting: incident" in out and "still blocked after 1s: could not enqueue the repair" in out


class RefusingAgent:
    """A replay endpoint that answers every replay 500, noting what it was sent."""

    def __init__(self):
        agent = self
        self.requests: list[tuple[dict, bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                agent.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/replay"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_flag_source_wait_gives_up_on_a_repair_whose_agent_answers_500_and_the_replay_was_signed(
        capsys, celery_worker_process, lead):
    agent = RefusingAgent()
    try:
        admin = get_user_model().objects.create_superuser("fw-root", "r@example.com", "pass-1234-kintsugi")
        ws = Workspace.objects.create(name="refused")
        Source.objects.create(workspace=ws, source_id="kb/a", content="Returns within 30 days.")
        reg, _ = register_agent(workspace=ws, name="far_desk", replay=agent.url, actor=admin, reason="t", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        a = api.post("/api/v1/recording/actions/", {"agent": "far_desk", "payload": {"ticket": "t1"}},
                     format="json").json()["action"]
        api.post(f"/api/v1/recording/actions/{a}/ingest/", {"source": "kb/a"}, format="json")
        api.post(f"/api/v1/recording/actions/{a}/set/", {"key": "t1/decision", "value": "reply"}, format="json")
        assert api.post(f"/api/v1/recording/actions/{a}/finish/", {"decision": {"choice": "reply"}},
                        format="json").json()["committed"]
        # It answered ticket t1 with the flagged page among its inputs: the repair replays it with the page
        # masked (a digest of the page without a ticket would be masked instead, never replayed).
        started = time.monotonic()
        code, out = run_command(capsys, "flag_source", "--workspace", "refused", "--source", "kb/a", "--reason", "r",
                                "--user", lead.username, "--wait", "--timeout", "5", "--json")
        assert code == 1, out
        assert time.monotonic() - started < 15
        assert "gave up waiting" in out or json.loads(out[out.index("{"):out.rindex("}") + 1])["status"] == "failed"
        assert agent.requests, "the agent's replay endpoint received nothing"
        headers, body = agent.requests[0]
        secret = AgentRegistration.objects.get(pk=reg.pk).replay_secret
        verify(body, headers["x-kintsugi-timestamp"], headers["x-kintsugi-signature"], secret)
        assert json.loads(body)["purpose"] == "repair" and json.loads(body)["replay_id"]
        assert json.loads(body)["action"] == a
    finally:
        agent.stop()


def test_export_state_gives_money_as_integer_cents_with_the_unit_in_the_key(capsys):
    from provenance.recording.services import desk_run

    desk_run(workspace="cents")
    code, out = run_command(capsys, "export_state", "--workspace", "cents", "--json")
    effects = json.loads(out)["effects"]
    assert code == 0 and effects
    # Each effect with its currency and the digest of what it says (a changed email body is another effect).
    assert all(set(e) == {"kind", "ticket", "amount_cents", "currency", "content"} and type(e["amount_cents"]) is int
               for e in effects)
    assert any(e["kind"] == "refund" and e["amount_cents"] > 0 for e in effects)
    code, text = run_command(capsys, "export_state", "--workspace", "cents")
    refund = next(e for e in effects if e["kind"] == "refund")
    assert f"effect refund {refund['ticket']} {refund['amount_cents'] / 100:.2f}" in text
