"""A remote agent that takes its replay but never finishes it, or makes a call the recorder refuses:
the repair blocks (retried like an outage) or fails with the reason, and the graph is not changed."""
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth import get_user_model

from provenance.models import Source, Workspace
from provenance.access.onboarding import register_agent
from provenance.recording.replay import ReplayUnavailable
from repairs.job import run_repair
from tests.agents.writer_reader import record_writer_reader
from tests.helpers import graph_dump, open_incident

pytestmark = pytest.mark.django_db(transaction=True)


class Agent:
    """A real HTTP replay endpoint whose behaviour each test chooses."""

    def __init__(self, behave):
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                agent.requests.append(request)
                behave(request)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.requests: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/replay"


def callback(request, op, body):
    req = urllib.request.Request(f"{request['base_url']}/api/v1/recording/actions/{request['action']}/{op}/",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {request['token']}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def replays_writer_as_recorded(request) -> bool:
    """The writer's replay done as the recorded writer would: it ingests kb/page (answering None in a repair)
    and, finding nothing, writes nothing. True when `request` was the writer's."""
    if request["agent"] != "writer":
        return False
    status, answer = callback(request, "ingest", {"source": "kb/page"})
    assert status == 200, answer
    callback(request, "finish", {"decision": {"wrote": False}})
    return True


def recorded(name: str, agent: Agent) -> Workspace:
    """writer ingests kb/page and writes a fact; reader reads it: flagging kb/page re-runs the writer (the
    page answering None) and then the reader."""
    admin = get_user_model().objects.create_superuser(f"{name}-root", "r@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name=name)
    Source.objects.create(workspace=ws, source_id="kb/page", content="refunds: 30 days")
    for a in ("writer", "reader"):
        register_agent(workspace=ws, name=a, replay=agent.url, timeout_seconds=2, actor=admin, reason="t", via="cli")
    assert record_writer_reader(ws, admin, value="30 days", decision={"days": 30})
    return ws


def test_a_replay_never_finished_blocks_the_repair_with_the_reason(settings):
    agent = Agent(replays_writer_as_recorded)  # the writer replays; the reader takes it, never calls finish
    ws = recorded("never-finishes", agent)
    before = graph_dump(ws.name)
    incident = open_incident(ws.name, "kb/page")
    with pytest.raises(ReplayUnavailable):
        run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    assert incident.status == "blocked"
    assert "agent 'reader'" in incident.error and "did not finish its replay" in incident.error
    assert [r["agent"] for r in agent.requests] == ["writer", "reader"]
    reader = agent.requests[1]
    assert "token" not in incident.error.lower() or reader["token"] not in incident.error
    assert reader["mode"] == "replay" and reader["payload"] == {"ticket": "t1"}
    assert graph_dump(ws.name) == before


def test_a_replay_call_the_recorder_refuses_fails_the_repair_as_in_process(settings):
    answers = []

    def bad_then_finish(request):
        answers.append(callback(request, "set", {"key": "bad\x00key", "value": 1}))
        answers.append(callback(request, "effect", {"kind": "refund", "amount": 100, "idempotency_key": "r"}))
        answers.append(callback(request, "finish", {"decision": {"days": 0}}))

    agent = Agent(bad_then_finish)
    ws = recorded("refused-call", agent)
    incident = run_repair(incident_id=open_incident(ws.name, "kb/page").pk)
    assert answers[0][0] == 400 and answers[0][1]["error"]["code"] == "invalid"
    assert answers[1] == (200, answers[1][1]) and answers[1][1]["perform"] is False and answers[1][1]["held"]
    assert incident.status == "failed" and "made a call the recorder refused" in incident.error
