"""kintsugi's HTTP API as calls: a person's onboarding calls, the recording protocol's calls (one at a
time, several of one action in one request, or a whole finished recording in one request) and the
compensations an agent performs itself. The Python standard library only."""
from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kintsugi_client import connections

__all__ = ["Client", "KintsugiError", "effect_body"]

# Calls a recorder holds back before it sends them in the background (Client(buffer=...)); 0 sends
# every call as it is made.
BUFFER = 64


class KintsugiError(Exception):
    """An error answer of the API: `{"error": {"code", "message", "details"}}` and its status;
    `retry_after`: the seconds its Retry-After header asked for, if any."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        self.retry_after: float | None = None


def effect_body(kind: str, *, amount: int, ticket: str | None, currency: str, idempotency_key: str,
                external: bool | None, details: dict) -> dict:
    """The body of one effect call, as the protocol takes it (call by call, in several calls or in a
    whole recording): ticket and external only when given."""
    body = {"kind": kind, "amount": amount, "currency": currency, "details": details,
            "idempotency_key": idempotency_key}
    if ticket is not None:
        body["ticket"] = ticket
    if external is not None:
        body["external"] = external
    return body


def _seconds(header: str | None) -> float | None:
    """Retry-After in seconds (kintsugi sends whole seconds; an HTTP date is not waited on)."""
    try:
        value = float(header) if header is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


class Client:
    """`max_wait`: the most seconds one call spends waiting out rate limits (429 with Retry-After, e.g.
    flagging at 30 a minute); a wait that would go past it raises the 429 at once instead.
    `buffer`: how many calls whose answer the agent does not use (set, handoff) a recorder holds back
    and sends in the background (kintsugi_client.recorder); 0 sends each call as it is made.
    `keep_alive`: the seconds an idle connection still carries the next request (each thread keeps its
    own; kintsugi_client.connections says when a request is ever sent twice); 0: a connection per request."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0, max_wait: float = 60.0,
                 buffer: int = BUFFER, keep_alive: float = connections.KEEP_ALIVE):
        self.base_url, self.token, self.timeout, self.max_wait = base_url.rstrip("/"), token, timeout, max_wait
        self.buffer, self.keep_alive = buffer, keep_alive
        self._sending: ThreadPoolExecutor | None = None
        self._sending_lock = threading.Lock()

    def sender(self) -> ThreadPoolExecutor:
        """The one background thread this client sends held-back calls on, in the order they were made."""
        with self._sending_lock:
            if self._sending is None:
                self._sending = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kintsugi-send")
            return self._sending

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
        status, headers, raw = connections.exchange(
            method, f"{self.base_url}{path}", data, {
                "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                "Accept": "application/json"},
            timeout=self.timeout, keep_alive=self.keep_alive, replayable=connections.idempotent(method, path, body))
        if not 200 <= status < 300:
            try:
                error = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = raw[:200].decode("utf-8", "replace")
                if 300 <= status < 400:  # not followed: the token would go wherever it points
                    message = f"redirected to {headers.get('Location')!r} (point base_url there): {message}"
                error = {"code": "http_error", "message": message, "details": None}
            failure = KintsugiError(status, error.get("code", ""), error.get("message", ""), error.get("details"))
            failure.retry_after = _seconds(headers.get("Retry-After"))
            raise failure
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

    def calls(self, action: int, calls: list[dict]) -> list[dict]:
        """Several calls of one open action in one request, in order (each a single call's body with its
        `op`: ingest, get, set, handoff, effect, finish last); each call's answer, in order. All or
        nothing: a refused call raises KintsugiError naming it (`details["call"]`), none of them recorded."""
        return self.request("POST", f"/api/v1/recording/actions/{action}/calls/", {"calls": calls})["results"]

    def record_batch(self, actions: Any) -> dict:
        """A whole finished recording in one request (a kintsugi_client.batch.RecordingBatch, or its
        `actions` list): `{"committed", "actions": [ids], "results": [[answers]]}`. All or nothing."""
        actions = actions.actions if hasattr(actions, "actions") else actions
        return self.request("POST", "/api/v1/recording/batch/", {"actions": actions})

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
