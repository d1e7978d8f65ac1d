"""A small client for kintsugi's HTTP API: set up a workspace, record agents in your own process and
serve kintsugi's replays of them. The Python standard library only; copy it anywhere.

    client = Client("http://127.0.0.1:8000", person_token)         # onboarding, as a Workspace admin
    ws = client.ensure_workspace("desk", reason="our support desk")
    key = client.issue_agent_token(ws["id"], label="desk agents", reason="recording")

    desk = Desk(Client("http://127.0.0.1:8000", key), replay_secret=secret)  # the agent's krs_ secret
    @desk.agent("triage")
    def triage(rec, payload): ...                                  # rec.get / set / ingest / handoff / effect
    desk.run_root("triage", {"ticket": "t01", ...})                # the root and, depth first, its handoffs
    desk.serve_replays("127.0.0.1", 9100)                          # kintsugi re-runs actions here in repairs

serve_replays runs an agent only for a replay request signed with the registration's replay secret
(kintsugi_client.signing); anything else is answered 401 before any agent code runs. Its `verify` hook
sees each signed request and its headers before the agent runs (refuse a purpose you do not serve by
raising ForgedReplay), its `log` hook every request's outcome. The secret can be kept across restarts
(kintsugi_client.replay_secret); the client waits out a 429's Retry-After up to `max_wait` seconds.

An agent function is written exactly as an in-process `@agent` function of kintsugi: it gets a
recorder and the payload and returns a structured decision (a dict without floats).
"""
from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

from kintsugi_client.signing import ForgedReplay, SeenReplays, verify_request

__all__ = ["Client", "Desk", "ForgedReplay", "KintsugiError", "RemoteRecorder", "ReplayLog", "ReplayVerify"]


class KintsugiError(Exception):
    """An error answer of the API: `{"error": {"code", "message", "details"}}` and its status;
    `retry_after`: the seconds its Retry-After header asked for, if any."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        self.retry_after: float | None = None


def _seconds(header: str | None) -> float | None:
    """Retry-After in seconds (kintsugi sends whole seconds; an HTTP date is not waited on)."""
    try:
        value = float(header) if header is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


class Client:
    """`max_wait`: the most seconds one call spends waiting out rate limits (429 with Retry-After, e.g.
    flagging at 30 a minute); a wait that would go past it raises the 429 at once instead."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0, max_wait: float = 60.0):
        self.base_url, self.token, self.timeout, self.max_wait = base_url.rstrip("/"), token, timeout, max_wait

    def request(self, method: str, path: str, body: Any = None) -> Any:
        waited = 0.0
        while True:
            try:
                return self._request_once(method, path, body)
            except KintsugiError as exc:
                wait = exc.retry_after if exc.status == 429 else None
                if wait is None or waited + wait > self.max_wait:
                    raise
            # A throttled call changed nothing on the server (refused before the view ran): safe to send again.
            time.sleep(wait)
            waited += wait

    def _request_once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                error = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "http_error", "message": raw[:200].decode("utf-8", "replace"), "details": None}
            failure = KintsugiError(exc.code, error.get("code", ""), error.get("message", ""), error.get("details"))
            failure.retry_after = _seconds(exc.headers.get("Retry-After"))
            raise failure from None
        return json.loads(raw) if raw else None

    # --- onboarding (a person's API token; the Workspace admin role) ---
    def workspaces(self) -> list[dict]:
        out, path = [], "/api/v1/workspaces/"
        while path:
            page = self.request("GET", path)
            out += page["results"]
            path = page["next"][len(self.base_url):] if page.get("next") else None
        return out

    def ensure_workspace(self, name: str, *, reason: str) -> dict:
        found = [w for w in self.workspaces() if w["name"] == name]
        return found[0] if found else self.request("POST", "/api/v1/workspaces/", {"name": name, "reason": reason})

    def create_source(self, workspace: int, source_id: str, content: str, *, reason: str, title: str = "",
                      trust: str | None = None) -> dict:
        """Create a source; KintsugiError 409 `already_exists` if it exists (a create never overwrites)."""
        body = {"source_id": source_id, "content": content, "title": title, "reason": reason}
        return self.request("POST", f"/api/v1/workspaces/{workspace}/sources/", body | ({"trust": trust} if trust else {}))

    def update_source(self, workspace: int, source_id: str, *, reason: str, content: str | None = None,
                      title: str = "") -> dict:
        body = {"source_id": source_id, "title": title, "reason": reason}
        return self.request("PATCH", f"/api/v1/workspaces/{workspace}/sources/",
                            body | ({"content": content} if content is not None else {}))

    def put_source(self, workspace: int, source_id: str, content: str, *, reason: str, title: str = "",
                   trust: str | None = None) -> dict:
        """Create the source, or change an existing one's content (an explicit update, with the reason)."""
        try:
            return self.create_source(workspace, source_id, content, reason=reason, title=title, trust=trust)
        except KintsugiError as exc:
            if exc.status != 409:
                raise
        return self.update_source(workspace, source_id, reason=reason, content=content, title=title)

    def create_ticket(self, workspace: int, ticket_id: str, *, reason: str, **fields: Any) -> dict:
        """Create a ticket; KintsugiError 409 `already_exists` if it exists."""
        return self.request("POST", f"/api/v1/workspaces/{workspace}/tickets/",
                            {"ticket_id": ticket_id, "reason": reason, **fields})

    def update_ticket(self, workspace: int, ticket_id: str, *, reason: str, **fields: Any) -> dict:
        return self.request("PATCH", f"/api/v1/workspaces/{workspace}/tickets/",
                            {"ticket_id": ticket_id, "reason": reason, **fields})

    def put_ticket(self, workspace: int, ticket_id: str, *, reason: str, **fields: Any) -> dict:
        """Create the ticket, or change an existing one's fields (an explicit update, with the reason)."""
        try:
            return self.create_ticket(workspace, ticket_id, reason=reason, **fields)
        except KintsugiError as exc:
            if exc.status != 409:
                raise
        return self.update_ticket(workspace, ticket_id, reason=reason, **fields)

    def register_agent(self, workspace: int, name: str, replay_url: str, *, reason: str,
                       timeout_seconds: int = 30) -> dict:
        """Register (or re-point) an agent; a new registration's answer carries `replay_secret`, once."""
        return self.request("POST", f"/api/v1/workspaces/{workspace}/agents/", {
            "name": name, "replay_url": replay_url, "timeout_seconds": timeout_seconds, "reason": reason})

    def rotate_replay_secret(self, workspace: int, name: str, *, reason: str) -> str:
        """A new replay signing secret for a registered agent (the old one is refused from now on)."""
        return self.request("POST", f"/api/v1/workspaces/{workspace}/agents/{name}/rotate-secret/",
                            {"reason": reason})["replay_secret"]

    def flag_source(self, source: int, *, reason: str) -> dict:
        """Flag a source (its API id) as bad: opens an incident and starts its repair (Support lead role).
        Throttled per user (30 a minute by default): the call waits out the 429 within max_wait."""
        return self.request("POST", f"/api/v1/sources/{source}/flag/", {"reason": reason})

    def add_member(self, workspace: int, username: str, *, reason: str, role: str | None = None) -> dict:
        """Make a user a member of a workspace (Workspace admin role); `role`: one they must hold."""
        body = {"username": username, "reason": reason, **({"role": role} if role else {})}
        return self.request("POST", f"/api/v1/workspaces/{workspace}/members/", body)

    def remove_member(self, workspace: int, username: str, *, reason: str) -> dict:
        return self.request("DELETE", f"/api/v1/workspaces/{workspace}/members/{username}/", {"reason": reason})

    def export_state(self, workspace: int) -> dict:
        """Active facts, standing decisions and live effects (`manage.py export_state --json`)."""
        return self.request("GET", f"/api/v1/workspaces/{workspace}/state/")

    def issue_agent_token(self, workspace: int, *, label: str, reason: str, agents: list[str] | None = None) -> str:
        body = {"label": label, "reason": reason, **({"agents": agents} if agents else {})}
        return self.request("POST", f"/api/v1/workspaces/{workspace}/agent-tokens/", body)["key"]

    # --- recording (a recording token) ---
    def open_action(self, agent: str, payload: dict | None = None, *, parent: int | None = None) -> dict:
        body: dict = {"agent": agent}
        if payload is not None:
            body["payload"] = payload
        if parent is not None:
            body["parent"] = parent
        return self.request("POST", "/api/v1/recording/actions/", body)

    def call(self, action: int, op: str, body: dict) -> dict:
        return self.request("POST", f"/api/v1/recording/actions/{action}/{op}/", body)

    # --- compensations your agent performs itself (the workspace chose agent_pull; a recording token) ---
    def pending_compensations(self, *, limit: int = 50) -> list[dict]:
        """Every approved compensation awaiting your agent, oldest first: each with `compensates` (the
        effects it answers for, with the idempotency keys you recorded them under) and `idempotency_key`
        (carry it to your provider: an item offered again is then performed once)."""
        out, path = [], f"/api/v1/recording/compensations/?state=pending&limit={limit}"
        while path:
            page = self.request("GET", path)
            out += page["results"]
            path = page["next"][page["next"].index("/api/"):] if page.get("next") else None
        return out

    def ack_compensation(self, item_id: int, outcome: str, *, reference: str = "", message: str = "") -> dict:
        """Answer for one compensation: outcome "performed" or "failed". The same answer again returns the
        first one (safe to retry); a different answer is KintsugiError 409."""
        return self.request("POST", f"/api/v1/recording/compensations/{item_id}/ack/",
                            {"outcome": outcome, "reference": reference, "message": message})


class RemoteRecorder:
    """The in-process Recorder's methods, each one call of the recording protocol."""

    def __init__(self, client: Client, action: int, payload: dict):
        self._client, self.action_id, self.ticket = client, action, payload.get("ticket")
        self._effects = 0
        self.effects: list[dict] = []  # the answers, in order: each says whether to perform it

    def ingest(self, source_id: str) -> str | None:
        return self._client.call(self.action_id, "ingest", {"source": source_id})["content"]

    def get(self, key: str, default: Any = None) -> Any:
        return self._client.call(self.action_id, "get", {"key": key, "default": default})["value"]

    def set(self, key: str, value: Any, *, valid_from: str | None = None, valid_until: str | None = None,
            observed_at: str | None = None) -> None:
        body = {"key": key, "value": value}
        for name, clock in (("valid_from", valid_from), ("valid_until", valid_until), ("observed_at", observed_at)):
            if clock is not None:
                body[name] = clock
        self._client.call(self.action_id, "set", body)

    def handoff(self, agent: str, payload: dict) -> None:
        self._client.call(self.action_id, "handoff", {"agent": agent, "payload": payload})

    def effect(self, kind: str, *, amount: int = 0, ticket: str | None = None, currency: str = "USD",
               idempotency_key: str | None = None, external: bool | None = None, **details: Any) -> dict:
        """Record the effect before it leaves. Perform it only if the answer's `perform` is true (false
        while kintsugi replays this action in a repair: the effect is held for a person). `external`:
        the ticket is not one of the workspace's desk tickets (otherwise a live effect must name one)."""
        self._effects += 1
        body = {"kind": kind, "amount": amount, "currency": currency, "details": details,
                "idempotency_key": idempotency_key or f"action-{self.action_id}-effect-{self._effects}"}
        if ticket is not None:
            body["ticket"] = ticket
        if external is not None:
            body["external"] = external
        answer = self._client.call(self.action_id, "effect", body)
        self.effects.append(answer)
        return answer

    def finish(self, decision: dict) -> dict:
        return self._client.call(self.action_id, "finish", {"decision": decision})


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
    or wrap them); by default a Client with this desk's client's timeout."""

    def __init__(self, client: Client, *, replay_secret: str | Mapping[str, str] | None = None,
                 perform: Callable[[str, dict, dict], None] | None = None,
                 replay_client: ReplayClientFactory | None = None):
        self.client, self.agents = client, {}
        self.replay_secret = replay_secret
        self.replay_client = replay_client or (lambda base_url, token: Client(
            base_url, token, timeout=self.client.timeout, max_wait=self.client.max_wait))
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
        decision = self.agents[agent](rec, payload)
        answer = rec.finish(decision)
        for effect in rec.effects:
            if effect["perform"]:
                self.perform(agent, payload, effect)
        return answer

    def run_root(self, agent: str, payload: dict) -> list[int]:
        """Record a root action and everything it hands off, in the order kintsugi's recorder runs them."""
        opened = self.client.open_action(agent, payload)
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
