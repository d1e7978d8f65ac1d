"""Re-running an agent that lives in another process: the repair (or the verification baseline) asks it
to replay one action through its registered replay endpoint.

The worker that re-runs the action POSTs to the agent's replay_url
    {"workspace", "agent", "action", "payload", "mode": "replay", "base_url", "token"}
and serves that replay's calls itself, on a loopback HTTP server of its own that lives exactly as long
as the replay (bound to KINTSUGI_REPLAY_CALLBACK_HOST, a free port). The agent makes the same calls as
when it recorded (`<base_url>/api/v1/recording/actions/<action>/get`, `set`, `ingest`, `handoff`,
`effect`, `finish`) with `Authorization: Bearer <token>`; the token is fresh per replay and good for
that one action on that one server. The calls are applied by provenance.protocol to the repair's own
Recorder, so the agent reads the repair's view of memory (the flagged sources masked), and every
effect answers `perform: false`: it is held for a person's approval, never performed by the agent.
The agent does not open its handoffs during a replay: the repair runs them, matches them to the old
children and replays each one in turn, as it does for in-process agents.

The answer to the POST may come before or after `finish`; the replay ends when the action is finished.
No answer, an error status or no `finish` within the registration's timeout raises ReplayUnavailable, a
GraphUnavailable: the repair blocks with that reason and resumes like any repair an outage stopped.
"""
from __future__ import annotations

import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings

from core.errors import error_body, first_line, map_domain_error
from provenance import protocol
from provenance.graph import GraphUnavailable

CALL_PATH = re.compile(r"^/api/v1/recording/actions/(\d+)/(ingest|get|set|handoff|effect|finish)/?$")
MAX_BODY = 512 * 1024


class ReplayUnavailable(GraphUnavailable):
    """A remote agent did not replay an action (unreachable, an error status, no finish in time). A
    GraphUnavailable on purpose: whoever blocks and retries a repair on an outage does so for this too."""

    code = "agent_unavailable"

    def public_message(self) -> str:
        return first_line(self)


class ReplayFailed(ValueError):
    """The agent's replay made a call the recorder refuses (the in-process agent would have raised)."""


class RemoteAgent:
    """An agent registration as the recorder calls an agent: fn(rec, payload) -> decision."""

    def __init__(self, *, workspace: str, name: str, replay_url: str, timeout_seconds: int):
        self.workspace, self.agent_name = workspace, name
        self.replay_url, self.timeout_seconds = replay_url, timeout_seconds

    def __repr__(self) -> str:
        return f"RemoteAgent({self.agent_name!r} at {self.replay_url})"

    def __call__(self, rec, payload: dict) -> dict:
        return _replay(self, rec, payload)


def remote_agents(workspace: str) -> dict[str, RemoteAgent]:
    from provenance.models import AgentRegistration

    rows = AgentRegistration.objects.filter(workspace__name=workspace).values_list("name", "replay_url",
                                                                                   "timeout_seconds")
    return {name: RemoteAgent(workspace=workspace, name=name, replay_url=url, timeout_seconds=timeout)
            for name, url, timeout in rows}


class _Replay:
    """One replay in flight: the action's Recorder, its token, and how it ended."""

    def __init__(self, agent: RemoteAgent, rec, perform: bool):
        self.agent, self.rec, self.record = agent, rec, rec._record
        self.token = secrets.token_urlsafe(32)
        self.perform = perform
        self.keys: dict = {}
        self.finished = threading.Event()
        self.refused: str | None = None  # the first call the recorder refused
        self.lock = threading.Lock()

    def handle(self, action: int, op: str, body) -> tuple[int, dict]:
        if action != self.record.id:
            return 404, error_body("not_found", f"this replay is of action {self.record.id}, not {action}")
        with self.lock:
            if self.finished.is_set():
                return 409, error_body("conflict", f"action {action} is finished")
            try:
                if op == "finish":
                    protocol.finish(self.record, body)
                    self.finished.set()
                    return 200, {"action": action, "dhash": self.record.dhash, "committed": False, "next": None}
                return 200, protocol.apply_op(self.rec, self.record, op, body, perform=self.perform, keys=self.keys)
            except Exception as exc:
                mapped = map_domain_error(exc) if not isinstance(exc, protocol.CallConflict) else \
                    (409, "conflict", str(exc), None)
                if mapped is None:
                    raise
                status, code, message, details = mapped
                self.refused = self.refused or f"{op}: {message}"
                return status, error_body(code, message, details)


def _server(replay: _Replay) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # the worker's log is for the repair, not each callback
            pass

        def do_POST(self):
            match = CALL_PATH.match(self.path.split("?", 1)[0])
            if match is None:
                return self._send(404, {"error": {"code": "not_found", "message": f"no replay call at {self.path[:100]}",
                                                  "details": None}})
            if not secrets.compare_digest(self.headers.get("Authorization", ""), f"Bearer {replay.token}"):
                return self._send(401, {"error": {"code": "authentication_failed",
                                                  "message": "this replay's token is required", "details": None}})
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._send(413, {"error": {"code": "invalid", "message": "request body too large",
                                                  "details": None}})
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError):
                return self._send(400, {"error": {"code": "parse_error", "message": "the body is not JSON",
                                                  "details": None}})
            self._send(*replay.handle(int(match.group(1)), match.group(2), body))

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer((settings.KINTSUGI_REPLAY_CALLBACK_HOST, 0), Handler)
    server.daemon_threads = True
    return server


def _replay(agent: RemoteAgent, rec, payload: dict) -> dict:
    session = rec._session
    replay = _Replay(agent, rec, perform=session.effects_mode == "live")
    server = _server(replay)
    thread = threading.Thread(target=server.serve_forever, name=f"replay-{rec.action_id}", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    where = f"agent {agent.agent_name!r} at {agent.replay_url}"
    deadline = time.monotonic() + agent.timeout_seconds
    try:
        body = json.dumps({"workspace": agent.workspace, "agent": agent.agent_name, "action": rec.action_id,
                           "payload": payload, "mode": "replay", "base_url": f"http://{host}:{port}",
                           "token": replay.token}).encode()
        request = urllib.request.Request(agent.replay_url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=agent.timeout_seconds) as response:
                response.read(MAX_BODY)
        except urllib.error.HTTPError as exc:
            raise ReplayUnavailable(f"{where} answered the replay of action {rec.action_id} with HTTP {exc.code}; "
                                    f"the repair resumes once the agent replays") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ReplayUnavailable(f"{where} did not take the replay of action {rec.action_id} ({reason}); "
                                    f"the repair resumes once the agent answers") from None
        if not replay.finished.wait(max(0.0, deadline - time.monotonic())):
            raise ReplayUnavailable(f"{where} did not finish its replay of action {rec.action_id} within "
                                    f"{agent.timeout_seconds}s; the repair resumes once the agent answers")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    if replay.refused:
        raise ReplayFailed(f"{where} made a call the recorder refused while replaying action {rec.action_id}: "
                           f"{replay.refused}")
    return replay.record.decision
