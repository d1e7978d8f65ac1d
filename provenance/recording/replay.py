"""Re-running an agent that lives in another process: the repair (or the verification baseline) asks it
to replay one action through its registered replay endpoint.

The worker that re-runs the action POSTs to the agent's replay_url
    {"workspace", "agent", "action", "payload", "mode": "replay", "purpose", "replay_id", "base_url", "token"}
signed with the registration's replay secret: `X-Kintsugi-Timestamp: <unix seconds>` and
`X-Kintsugi-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>`, so the agent runs only what
kintsugi asked (kintsugi_client.signing verifies it: a bad or missing signature, a timestamp more than
300 s away or a replay_id seen before is refused with 401). `purpose` says why it runs: "repair" (a
repair job re-running an action the flagged source reached), "verification" (the clean baseline run that
checks a repair), "what_if" (the walk of a what-if or of the suspicious-sources analysis, never applied).
The worker serves that replay's calls itself, on a loopback HTTP server of its own that lives exactly as long
as the replay (bound to KINTSUGI_REPLAY_CALLBACK_HOST, a free port). The agent makes the same calls as
when it recorded (`<base_url>/api/v1/recording/actions/<action>/get`, `set`, `ingest`, `handoff`,
`effect`, `finish`) with `Authorization: Bearer <token>`; the token is fresh per replay and good for
that one action on that one server. The calls are applied by provenance.recording.protocol to the repair's own
ActionRecorder, so the agent reads the repair's view of memory (the flagged sources masked), and every
effect answers `perform: false`: it is held for a person's approval, never performed by the agent.
The agent does not open its handoffs during a replay: the repair runs them, matches them to the old
children and replays each one in turn, as it does for in-process agents.

The answer to the POST may come before or after `finish`; the replay ends when the action is finished.
No answer, an error status or no `finish` within the registration's timeout raises ReplayUnavailable, a
GraphUnavailable: the repair blocks with that reason and resumes like any repair an outage stopped; past
the agent's outage schedule it needs attention and is still resumed once the agent answers (repairs.job). The POST goes through core.egress: the
replay URL is checked again against the egress policy, pinned to the address checked, never redirected,
and a failure is told in that module's fixed words, never the remote text.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings

from core import egress
from core.errors import error_body, first_line, map_domain_error
from provenance.recording import protocol
from provenance.access.effect_declarations import required_details_of
from provenance.graph.graph import GraphUnavailable

CALL_PATH = re.compile(r"^/api/v1/recording/actions/(\d+)/(ingest|get|set|handoff|effect|finish|calls)/?$")
MAX_BODY = 512 * 1024


class ReplayUnavailable(GraphUnavailable):
    """A remote agent did not replay an action (unreachable, an error status, no finish in time). A
    GraphUnavailable on purpose: whoever blocks and retries a repair on an outage does so for this too."""

    code = "agent_unavailable"

    def public_message(self) -> str:
        return first_line(self)


class ReplayFailed(ValueError):
    """The agent's replay made a call the recorder refuses (the in-process agent would have raised)."""


SIGNATURE_VERSION = "v1"
PURPOSES = ("repair", "verification", "what_if")


def sign(body: bytes, secret: str, timestamp: int) -> str:
    """The X-Kintsugi-Signature of a replay POST (the same as kintsugi_client.signing.sign's)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={mac}"


def replay_purpose(session) -> str:
    """Why a session re-runs an action: its effects mode tells a repair (held for approval) from the
    verification baseline (sandbox); a held walk of an incident never opened (no id) is a what-if, which
    the suspicious-sources analysis runs too."""
    if session.effects_mode == "sandbox":
        return "verification"
    if session.effects_mode == "held" and session.incident is None:
        return "what_if"
    return "repair"


class RemoteAgent:
    """An agent registration as the recorder calls an agent: fn(rec, payload) -> decision."""

    def __init__(self, *, workspace: str, name: str, replay_url: str, timeout_seconds: int, replay_secret: str):
        self.workspace, self.agent_name = workspace, name
        self.replay_url, self.timeout_seconds = replay_url, timeout_seconds
        self.replay_secret = replay_secret

    def __repr__(self) -> str:
        return f"RemoteAgent({self.agent_name!r} at {self.replay_url})"

    def __call__(self, rec, payload: dict) -> dict:
        return _replay(self, rec, payload)


def remote_agents(workspace: str) -> dict[str, RemoteAgent]:
    from provenance.models import AgentRegistration

    rows = AgentRegistration.objects.filter(workspace__name=workspace).values_list(
        "name", "replay_url", "timeout_seconds", "replay_secret")
    return {name: RemoteAgent(workspace=workspace, name=name, replay_url=url, timeout_seconds=timeout,
                              replay_secret=secret)
            for name, url, timeout, secret in rows}


class _Replay:
    """One replay in flight: the action's ActionRecorder, its token, and how it ended."""

    def __init__(self, agent: RemoteAgent, rec, perform: bool):
        self.agent, self.rec, self.record = agent, rec, rec._record
        self.token = secrets.token_urlsafe(32)
        self.perform = perform
        self.keys: dict = {}
        # Read here, on the repair's thread: the calls are answered on the callback server's threads,
        # which never open a database connection (one each would outlive its thread).
        self.declared = required_details_of(agent.workspace)
        self.finished = threading.Event()
        self.refused: str | None = None  # the first call the recorder refused
        self.lock = threading.Lock()

    def handle_calls(self, action: int, body) -> tuple[int, dict]:
        """The several-calls form, as the API answers it: each call's answer in order, or the first
        refusal naming its place (a refused call fails the replay, so what came before it does not matter)."""
        calls = body.get("calls") if isinstance(body, dict) else None
        if not isinstance(calls, list) or not calls or not all(isinstance(c, dict) for c in calls):
            return 400, error_body("invalid", "calls must be a non-empty list of calls")
        results = []
        for i, call in enumerate(calls):
            op = call.get("op")
            if op not in protocol.OPS + ("finish",) or (op == "finish" and i != len(calls) - 1):
                return 400, error_body("invalid", "each call's op is a call of the protocol, finish only last",
                                       {"call": i, "op": op})
            status, answer = self.handle(action, op, {k: v for k, v in call.items() if k != "op"})
            if status != 200:
                answer["error"]["details"] = {"call": i, "op": op, "cause": answer["error"].get("details")}
                return status, answer
            results.append(answer)
        return 200, {"results": results}

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
                return 200, protocol.apply_op(self.rec, self.record, op, body, perform=self.perform, keys=self.keys,
                                              declared=self.declared)
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
            if match.group(2) == "calls":
                return self._send(*replay.handle_calls(int(match.group(1)), body))
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


# How often the replay's callback server looks for its shutdown. Every replay ends with one, and at the
# library's default (0.5 s) a remote repair spent most of its time waiting there: 31 s for the example
# desk's 66 actions.
SHUTDOWN_POLL_SECONDS = 0.02


def _traced(agent: RemoteAgent, action_id: int) -> str:
    """Said of an action recorded from an OpenTelemetry trace (provenance.recording.otel): a trace tells what was
    done, never how to do it again, so its agent's replay endpoint is the only way to re-run it."""
    from provenance.models import Recording

    traced = Recording.objects.filter(workspace__name=agent.workspace, state__traced=True,
                                      state__records__contains=[{"id": action_id}]).exists()
    return (" (the action was recorded from an OpenTelemetry trace: re-running it needs its agent's replay "
            "endpoint; nothing was re-run or changed)") if traced else ""


def _replay(agent: RemoteAgent, rec, payload: dict) -> dict:
    if not agent.replay_secret:  # sealed with a key this home does not have (core.secret_box)
        raise ReplayFailed(f"agent {agent.agent_name!r}'s replay secret cannot be opened with this home's "
                           f"KINTSUGI_SECRET_BOX_KEY: bring the key it was sealed with, or rotate the secret")
    session = rec._session
    replay = _Replay(agent, rec, perform=session.effects_mode == "live")
    server = _server(replay)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
                              name=f"replay-{rec.action_id}", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    where = f"agent {agent.agent_name!r} at {agent.replay_url}"
    deadline = time.monotonic() + agent.timeout_seconds
    try:
        body = json.dumps({"workspace": agent.workspace, "agent": agent.agent_name, "action": rec.action_id,
                           "payload": payload, "mode": "replay", "purpose": replay_purpose(session),
                           "replay_id": secrets.token_urlsafe(16), "base_url": f"http://{host}:{port}",
                           "token": replay.token}).encode()
        timestamp = int(time.time())
        headers = {"X-Kintsugi-Timestamp": str(timestamp),
                   "X-Kintsugi-Signature": sign(body, agent.replay_secret, timestamp)}
        try:
            egress.post_json(agent.replay_url, body, timeout=agent.timeout_seconds, max_answer=MAX_BODY,
                             headers=headers)
        except egress.EgressFailed as exc:
            # The outcome's fixed words only: the remote side's own text would tell the incident's readers
            # what listens at whatever address the URL names.
            said = (f"agent {agent.agent_name!r} {exc.outcome}: replay of action {rec.action_id} at {agent.replay_url}"
                    f"{_traced(agent, rec.action_id)}")
            if exc.outcome == egress.Outcome.REFUSED:  # waiting mends nothing; a changed setting or URL does
                raise ReplayFailed(said) from None
            raise ReplayUnavailable(said) from None
        if not replay.finished.wait(max(0.0, deadline - time.monotonic())):
            raise ReplayUnavailable(f"{where} did not finish its replay of action {rec.action_id} within "
                                    f"{agent.timeout_seconds}s{_traced(agent, rec.action_id)}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    if replay.refused:
        raise ReplayFailed(f"{where} made a call the recorder refused while replaying action {rec.action_id}: "
                           f"{replay.refused}")
    return replay.record.decision
