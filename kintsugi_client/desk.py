"""A desk of agent functions recorded over the recording protocol, and the server kintsugi's signed
replays of them are answered from (see the package's docstring)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

from kintsugi_client import connections
from kintsugi_client.client import Client, KintsugiError
from kintsugi_client.recorder import RemoteRecorder
from kintsugi_client.signing import ForgedReplay, SeenReplays, verify_request

__all__ = ["Desk", "ReplayLog", "ReplayVerify"]


AgentFn = Callable[[RemoteRecorder, dict], dict]
# serve_replays' hooks: verify(request, headers) runs after the signature holds and before the agent
# (raise ForgedReplay to refuse with 401); log(event) hears every request's outcome.
ReplayVerify = Callable[[dict, Mapping[str, str]], None]
ReplayLog = Callable[[dict], None]
ReplayClientFactory = Callable[[str, str], Client]


class Desk:
    """Agent functions by name; records root actions depth first and serves kintsugi's replays.

    `replay_secret`: the `krs_` secret kintsugi signs replays with, one for every agent here, or a
    mapping of agent name to its registration's secret. serve_replays needs it.
    `replay_client(base_url, token)`: builds the client a replay's calls go through (yours, to observe
    or wrap them); by default a Client with this desk's client's timeout, buffer and keep_alive."""

    def __init__(self, client: Client, *, replay_secret: str | Mapping[str, str] | None = None,
                 perform: Callable[[str, dict, dict], None] | None = None,
                 replay_client: ReplayClientFactory | None = None):
        self.client, self.agents = client, {}
        self.replay_secret = replay_secret
        self.replay_client = replay_client or (lambda base_url, token: Client(
            base_url, token, timeout=self.client.timeout, max_wait=self.client.max_wait,
            buffer=getattr(self.client, "buffer", 0),
            keep_alive=getattr(self.client, "keep_alive", connections.KEEP_ALIVE)))
        self.perform = perform or (lambda agent, payload, effect: None)  # your real side effects
        self.seen = SeenReplays()
        self._server: ThreadingHTTPServer | None = None

    def _secret_for(self, body: bytes) -> str:
        """The secret to check `body` with; the agent it names is trusted only once the signature holds."""
        if isinstance(self.replay_secret, str):
            return self.replay_secret
        try:
            agent = json.loads(body).get("agent")
        except (ValueError, UnicodeDecodeError, AttributeError):
            agent = None
        secret = self.replay_secret.get(agent) if isinstance(agent, str) else None
        if not secret:
            raise ForgedReplay("no replay secret here for the agent this request names")
        return secret

    def verified(self, body: bytes, headers: Mapping[str, str]) -> dict:
        """The replay request in `body` if kintsugi signed it (signing.verify_request); ForgedReplay if not."""
        return verify_request(body, headers, self._secret_for(body), seen=self.seen)

    def agent(self, name: str) -> Callable[[AgentFn], AgentFn]:
        def register(fn: AgentFn) -> AgentFn:
            self.agents[name] = fn
            return fn
        return register

    def _run(self, client: Client, agent: str, action: int, payload: dict) -> dict:
        rec = RemoteRecorder(client, action, payload)
        try:
            decision = self.agents[agent](rec, payload)
        except BaseException:
            rec.discard()  # never finished, so nothing of the action lands: its held calls neither
            raise
        answer = rec.finish(decision)  # sends what the agent's calls left held back, or raises its refusal
        for effect in rec.effects:
            if effect["perform"]:
                self.perform(agent, payload, effect)
        return answer

    def run_root(self, agent: str, payload: dict, *, opened: dict | None = None) -> list[int]:
        """Record a root action and everything it hands off, in the order kintsugi's recorder runs them.
        `opened`: the answer of `client.open_action(agent, payload)` made earlier; the recording reads
        memory as it was then, whatever other recordings commit meanwhile."""
        opened = opened or self.client.open_action(agent, payload)
        ids = [opened["action"]]
        answer = self._run(self.client, agent, opened["action"], payload)
        while not answer.get("committed"):
            nxt = answer["next"]
            opened = self.client.open_action(nxt["agent"], parent=nxt["parent"])
            ids.append(opened["action"])
            answer = self._run(self.client, nxt["agent"], opened["action"], opened["payload"])
        return ids

    def replay(self, request: dict, *, client: Client | None = None) -> dict:
        """Re-run one action for kintsugi: calls go to the repair's callback URL with its token, through
        `client` if given, else the desk's replay_client."""
        client = client or self.replay_client(request["base_url"], request["token"])
        return self._run(client, request["agent"], request["action"], request["payload"])

    def serve_replays(self, host: str, port: int, *, block: bool = True, verify: ReplayVerify | None = None,
                      log: ReplayLog | None = None) -> ThreadingHTTPServer:
        """Serve kintsugi's signed replay POSTs. `verify(request, headers)`: your own check after the
        signature holds, before the agent runs (raise ForgedReplay to answer 401; see request["purpose"]:
        repair, verification or what_if). `log(event)`: each request's outcome, a dict with `status`,
        `outcome` (refused, ran, failed), `purpose`, `agent`, `action`, `replay_id`, `headers` (the
        X-Kintsugi ones) and `error`; never the replay's token."""
        if not self.replay_secret:
            raise ValueError("serve_replays needs replay_secret: the krs_ secret shown when the agent was registered")
        desk = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.request_seen: dict = {}
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    if length > 1024 * 1024:
                        return self._send(413, {"error": "request body too large"})
                    request = desk.verified(self.rfile.read(length), self.headers)
                    self.request_seen = request
                    if verify is not None:
                        verify(request, self.headers)
                except (ForgedReplay, ValueError) as exc:
                    return self._send(401, {"error": f"not a replay signed by kintsugi: {exc}"})
                try:
                    if request.get("agent") not in desk.agents:
                        return self._send(404, {"error": f"no agent {request.get('agent')!r} here"})
                    self._send(200, desk.replay(request))
                except KintsugiError as exc:
                    self._send(502, {"error": str(exc)})
                except Exception as exc:  # an agent bug answers 500; kintsugi blocks the repair with it
                    self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

            def _log(self, status: int, body: dict) -> None:
                seen = self.request_seen
                if log is None:
                    return
                outcome = "ran" if status == 200 else "refused" if status in (401, 404, 413) else "failed"
                log({"status": status, "outcome": outcome, "purpose": seen.get("purpose"), "agent": seen.get("agent"),
                     "action": seen.get("action"), "replay_id": seen.get("replay_id"),
                     "workspace": seen.get("workspace"), "error": body.get("error"),
                     "headers": {k: v for k, v in self.headers.items() if k.lower().startswith("x-kintsugi-")}})

            def _send(self, status: int, body: dict) -> None:
                try:  # before the answer leaves, so the log holds it by the time kintsugi has it
                    self._log(status, body)
                except Exception:  # noqa: BLE001  (a failing log hook must not change what kintsugi is answered)
                    pass
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        if block:
            self._server.serve_forever()
        else:
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self._server
