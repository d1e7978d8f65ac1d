"""An action's recorder over the recording protocol, sending in the background what the agent needs no
answer to.

`set` and `handoff` answer nothing the agent uses (the in-process recorder returns None for both), so
they are held back in a bounded buffer and sent without the agent waiting: with the next call whose
answer it does need (ingest, get, effect, finish), as one request of the several-calls form, in the
order they were made; or, once `Client.buffer` of them are held, on the client's background thread.
The protocol sees the same calls in the same order either way, so what is recorded is exactly what
call-by-call would record.

A held-back call the server refuses is never lost silently: the refusal (KintsugiError, naming the
call) is raised by the next call of the action, by its finish, or by flush(); after it every call
of that action raises it again (nothing later may be recorded past a gap). Calls still held at exit
are sent then, whether or not anything still refers to their recorder; a refusal there is logged to
stderr ("kintsugi_client").
"""
from __future__ import annotations

import atexit
import logging
import threading
from concurrent.futures import Future
from typing import Any

from kintsugi_client.client import Client, KintsugiError, effect_body

__all__ = ["RemoteRecorder"]

log = logging.getLogger("kintsugi_client")
# Recorders with calls not yet sent, held strongly: an agent that let go of its recorder (a desk's agent
# function returns, a node's run ends) still has those calls sent at exit; a recorder leaves the set when
# its calls are taken.
_HOLDING: "set[RemoteRecorder]" = set()


class RemoteRecorder:
    """The in-process Recorder's methods, each one call of the recording protocol. `buffer`: calls held
    back at most (default the client's; 0 sends each call as it is made)."""

    def __init__(self, client: Client, action: int, payload: dict, *, buffer: int | None = None):
        self._client, self.action_id, self.ticket = client, action, payload.get("ticket")
        self._effects = 0
        self.effects: list[dict] = []  # the answers, in order: each says whether to perform it
        self._limit = getattr(client, "buffer", 0) if buffer is None else buffer
        self._held: list[dict] = []
        self._sending: Future | None = None  # at most one batch in flight: the buffer stays bounded
        self._failure: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def failure(self) -> BaseException | None:
        """The refusal of a call this action held back (every later call of the action raises it), if any."""
        return self._failure

    # --- the protocol's calls ---
    def ingest(self, source_id: str) -> str | None:
        return self._answer("ingest", {"source": source_id})["content"]

    def get(self, key: str, default: Any = None) -> Any:
        return self._answer("get", {"key": key, "default": default})["value"]

    def get_many(self, keys: list[str], default: Any = None) -> list[Any]:
        """Several reads in one request (the several-calls form), each recorded as its own get, in order."""
        if len(keys) <= 1:
            return [self.get(key, default) for key in keys]
        answers = self.calls([{"op": "get", "key": key, "default": default} for key in keys])
        return [a["value"] for a in answers]

    def set(self, key: str, value: Any, *, valid_from: str | None = None, valid_until: str | None = None,
            observed_at: str | None = None) -> None:
        body = {"key": key, "value": value}
        for name, clock in (("valid_from", valid_from), ("valid_until", valid_until), ("observed_at", observed_at)):
            if clock is not None:
                body[name] = clock
        self._hold("set", body)

    def handoff(self, agent: str, payload: dict) -> None:
        self._hold("handoff", {"agent": agent, "payload": payload})

    def effect(self, kind: str, *, amount: int = 0, ticket: str | None = None, currency: str = "USD",
               idempotency_key: str | None = None, external: bool | None = None, **details: Any) -> dict:
        """Record the effect before it leaves. Perform it only if the answer's `perform` is true (false
        while kintsugi replays this action in a repair: the effect is held for a person). `external`:
        the ticket is not one of the workspace's desk tickets (otherwise a live effect must name one)."""
        self._effects += 1
        answer = self._answer("effect", effect_body(
            kind, amount=amount, ticket=ticket, currency=currency, external=external, details=details,
            idempotency_key=idempotency_key or f"action-{self.action_id}-effect-{self._effects}"))
        self.effects.append(answer)
        return answer

    def finish(self, decision: dict) -> dict:
        return self._answer("finish", {"decision": decision})

    def calls(self, calls: list[dict]) -> list[dict]:
        """Several calls of this action in one request (each `{"op": ..., **the call's body}`), after
        whatever is held back; their answers, in order."""
        with self._lock:
            self._settle()
            held, self._held = self._held, []
            _HOLDING.discard(self)
            if not held:
                return self._client.calls(self.action_id, list(calls))
            return self._send(held + list(calls))[len(held):]

    def flush(self) -> None:
        """Send what is held back now and wait for it; raises a refusal of any of it."""
        with self._lock:
            self._settle()
            held, self._held = self._held, []
            _HOLDING.discard(self)
            if held:
                self._send(held)

    def discard(self) -> None:
        """Drop what is held back (the agent failed: its action is never finished, so nothing of it lands)."""
        with self._lock:
            self._held = []
            _HOLDING.discard(self)

    # --- held back and sent ---
    def _hold(self, op: str, body: dict) -> None:
        if self._limit <= 0:
            self._raise_failure()
            self._client.call(self.action_id, op, body)
            return
        with self._lock:
            self._raise_failure()
            self._held.append({"op": op, **body})
            _HOLDING.add(self)
            if len(self._held) >= self._limit:
                self._settle()  # the batch before this one has landed: at most two buffers' worth exist
                held, self._held = self._held, []
                self._sending = self._client.sender().submit(self._send, held)

    def _answer(self, op: str, body: dict) -> dict:
        with self._lock:
            self._settle()
            held, self._held = self._held, []
            _HOLDING.discard(self)  # a batch sent in the background has landed (settled): nothing is left
            if not held:
                return self._client.call(self.action_id, op, body)  # as call by call: one plain request
            try:
                return self._client.calls(self.action_id, held + [{"op": op, **body}])[-1]
            except Exception as exc:
                if not (isinstance(exc, KintsugiError) and isinstance(exc.details, dict)
                        and exc.details.get("call") == len(held)):
                    self._failure = exc  # a held-back call was refused, or may not have landed: stop here
                    raise
            # Only the call that needs an answer was refused (nothing of the request landed): the held
            # calls land alone, and the call is made alone, answered or refused as call by call would be.
            self._send(held)
            return self._client.call(self.action_id, op, body)

    def _send(self, calls: list[dict]) -> list[dict]:
        """Send held-back calls (and any after them); a failure is kept and raised by every later call."""
        try:
            return self._client.calls(self.action_id, calls)
        except BaseException as exc:
            self._failure = self._failure or exc
            raise

    def _settle(self) -> None:
        """Wait for the batch in flight; raise the refusal of anything sent before (sticky)."""
        sending, self._sending = self._sending, None
        if sending is not None:
            try:
                sending.result()
            except BaseException:  # noqa: BLE001  (kept in _failure by _send, raised below)
                pass
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            # Told to the program now: what is still held can never land (nothing is recorded past the
            # gap), and the exit has nothing left to tell.
            self._held = []
            _HOLDING.discard(self)
            raise self._failure


@atexit.register
def _send_what_is_held() -> None:
    for rec in list(_HOLDING):
        try:
            rec.flush()
        except Exception as exc:  # noqa: BLE001  (exit has no caller left to raise to: said, not swallowed)
            log.error("kintsugi: calls of action %s held back at exit were refused: %s", rec.action_id, exc)
