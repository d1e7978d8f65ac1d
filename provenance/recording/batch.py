"""The recording protocol's batch forms: several calls of one open action in one request, and a whole
finished recording (an agent that records after the fact, or uploads a trace) in one request.

Both apply each call through provenance.recording.protocol exactly as the single calls do (the answers are the
single calls' answers, in order), in one transaction: a call that fails is named by its position (and,
for a whole recording, its action's), and nothing of the batch lands, in Postgres or in the graph.

A whole recording is executed as GraphRecorder.run_root executes an in-process root: actions in
depth-first order (each handoff opened after its parent finishes, the last handoff first), ids and seqs
allocated in that order, every read resolved against the workspace's memory plus what the recording's
earlier actions wrote; then one flush under the workspace lock, as record_root does. Several roots may
follow each other in one batch (each one's handoffs before the next root), as a desk run records them.
"""
from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from core.errors import DomainError, first_line, map_domain_error
from core.vocabulary import Via
from provenance.recording import protocol, quarantine, remote
from provenance import validation
from provenance.models import AgentToken, Recording, Workspace
from provenance.recording.decisions import MalformedDecision
from provenance.recording.protocol import CallConflict, InvalidCall
from provenance.recording.recorder import ActionRecord, ActionRecorder, GraphRecorder
from provenance.recording.services import workspace_lock

log = logging.getLogger("kintsugi.api")
MAX_CALLS = 10_000  # calls in one request (either form)
MAX_ACTIONS = 5_000  # actions in one whole recording
CALL_OPS = protocol.OPS + ("finish",)
# What a single call raises for its caller's mistakes (mapped by the API, MCP and CLI); anything else is
# ours, or the graph's, and propagates as it would from a single call.
CALL_ERRORS = (InvalidCall, CallConflict, LookupError, PermissionError, ValueError, MalformedDecision)


class BatchCallFailed(DomainError):
    """A call of a batch failed: `cause` is what the single call would have raised. Nothing was recorded.
    Answered with the cause's own status and code, naming where in the batch it was (the cause's details
    under "cause")."""

    def __init__(self, cause: Exception, *, call: int | None, op: str | None, action: int | None = None,
                 action_id: int | None = None):
        self.cause, self.call, self.op, self.action, self.action_id = cause, call, op, action, action_id
        where = f"action {action} ({'id ' + str(action_id) if action_id is not None else 'not opened'}), " \
            if action is not None else ""
        where += f"call {call} ({op})" if call is not None else "its opening"
        super().__init__(f"{where}: {cause}")
        mapped = map_domain_error(cause)
        # Every error a batch catches is mapped; anything else is answered (and logged) as an unknown
        # failure would be.
        if mapped is None:
            log.error("batch call failed: %s", self, exc_info=cause)
        self.status, self.code, _, self._cause_details = mapped or (500, "server_error", "", None)

    def public_message(self) -> str:
        return first_line(self) if self.status != 500 else "internal error; it has been logged"

    def details(self) -> dict:
        where = {"action": self.action, "call": self.call, "op": self.op, "action_id": self.action_id}
        return where | ({"cause": self._cause_details} if self._cause_details else {})


def _calls(calls) -> list[tuple[str, dict]]:
    if not isinstance(calls, list) or not calls:
        raise InvalidCall("calls must be a non-empty list of calls")
    if len(calls) > MAX_CALLS:
        raise InvalidCall(f"at most {MAX_CALLS} calls in one request")
    out = []
    for i, c in enumerate(calls):
        if not isinstance(c, dict) or c.get("op") not in CALL_OPS:
            raise BatchCallFailed(InvalidCall(f"each call is an object whose op is one of {', '.join(CALL_OPS)}"),
                                  call=i, op=c.get("op") if isinstance(c, dict) else None)
        if c["op"] == "finish" and i != len(calls) - 1:
            raise BatchCallFailed(InvalidCall("finish must be the action's last call"), call=i, op="finish")
        out.append((c["op"], {k: v for k, v in c.items() if k != "op"}))
    return out


# --- several calls of one open action --------------------------------------------------------------------
def calls(*, token: AgentToken, action_id, calls) -> dict:
    """Apply `calls` to the open action in order; answers {"results": [each call's answer]}."""
    ops = _calls(calls)
    with transaction.atomic():
        row = remote._locked_row(token, action_id)
        session = remote._session(row)
        try:
            index, record = remote._open_record(row, token, action_id)
        except CALL_ERRORS as exc:
            raise BatchCallFailed(exc, call=0, op=ops[0][0], action_id=action_id) from exc
        if any(op == "ingest" for op, _ in ops):
            session.quarantined = quarantine.held(workspace=row.workspace_id)
        # The action is read from the row and written back once, not once per call.
        rec, keys, results = ActionRecorder(session, record), row.state["keys"].setdefault(str(action_id), {}), []
        for i, (op, body) in enumerate(ops):
            try:
                if op == "finish":
                    row.state["records"][index] = protocol.dump_record(record)
                    remote._count_quarantined(row, session, record.agent)
                    results.append(remote.apply_finish(row, session, token=token, action_id=action_id, body=body))
                    return {"results": results}
                results.append(protocol.apply_op(rec, record, op, body, perform=True, keys=keys))
            except CALL_ERRORS as exc:
                remote._forget(row)
                raise BatchCallFailed(exc, call=i, op=op, action_id=action_id) from exc
        row.state["records"][index] = protocol.dump_record(record)
        remote._count_quarantined(row, session, record.agent)
        remote._save(row, session)
    return {"results": results}


# --- a whole finished recording ---------------------------------------------------------------------------
def _spec(i: int, spec) -> tuple[str, dict | None, int | None, list]:
    if not isinstance(spec, dict):
        raise BatchCallFailed(InvalidCall("each action is an object"), action=i, call=None, op=None)
    unknown = sorted(set(spec) - {"agent", "payload", "parent", "calls"})
    if unknown:
        raise BatchCallFailed(InvalidCall(f"unknown fields: {', '.join(unknown)}"), action=i, call=None, op=None)
    parent = spec.get("parent")
    if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < i):
        raise BatchCallFailed(InvalidCall("parent is the index of an earlier action, or null"), action=i, call=None,
                              op=None)
    try:
        ops = _calls(spec.get("calls"))
    except BatchCallFailed as exc:
        raise BatchCallFailed(exc.cause, action=i, call=exc.call, op=exc.op) from None
    if ops[-1][0] != "finish":
        raise BatchCallFailed(InvalidCall("a finished recording's actions each end with finish"), action=i,
                              call=len(ops) - 1, op=ops[-1][0])
    return spec.get("agent"), spec.get("payload"), parent, ops


def record(*, token: AgentToken, actions, traced: bool = False) -> dict:
    """Record a whole finished recording; answers {"committed": true, "actions": [ids]} or raises
    BatchCallFailed naming the action and call, with nothing written. `traced`: it came from an
    OpenTelemetry trace (provenance.recording.otel), so its agents cannot be asked to re-run it."""
    if not isinstance(actions, list) or not actions:
        raise InvalidCall("actions must be a non-empty list, in depth-first order")
    if len(actions) > MAX_ACTIONS:
        raise InvalidCall(f"at most {MAX_ACTIONS} actions in one request")
    specs = [_spec(i, a) for i, a in enumerate(actions)]
    if sum(len(s[3]) for s in specs) > MAX_CALLS:
        raise InvalidCall(f"at most {MAX_CALLS} calls in one request")
    hits: list[tuple[str, int]] = []
    ws = token.workspace
    try:
        with transaction.atomic():
            # The graph's lock before the workspace's row, as every writer of the graph takes them.
            workspace_lock(ws)
            ws = Workspace.objects.select_for_update().get(pk=ws.pk)
            session = remote._new_session(ws)
            session.quarantined = quarantine.held(workspace=ws)
            session.facts.contain = True  # reads resolve around what a flag contains, as every live read does
            hits = session.quarantine_hits
            remote.number_provisionally(ws, session)
            first = session.next_action
            session.facts.prefetch(_keys(specs))
            try:
                ids, results = _run(session, token, specs)
                session.flush()
            except BaseException:
                session.discard()
                raise
            ws.action_count += len(ids)
            ws.next_provisional_action = session.next_action  # its ids are taken, as an open recording's are
            ws.save(update_fields=["action_count", "next_provisional_action"])
            Recording.objects.create(
                workspace=ws, token=token, status=Recording.Status.COMMITTED, first_action=first, version=1,
                touched_at=timezone.now(), finished_at=timezone.now(),
                state={"records": [{"id": a} for a in ids], "batch": True, "next_action": session.next_action}
                | ({"traced": True} if traced else {}))
    finally:
        if hits:
            quarantine.record_attempts(workspace=ws, hits=hits, via=Via.API, agent=None)
    return {"committed": True, "actions": ids, "results": results}


def _keys(specs: list) -> set[str]:
    """The fact keys the batch's gets and sets name, those that pass the key check: a bad one (a NUL in
    it, which the graph's parameters cannot carry) is refused by its own call, named, not read here."""
    return {body["key"] for _, _, _, ops in specs for op, body in ops
            if op in ("get", "set") and _valid_key(body.get("key"))}


def _valid_key(key) -> bool:
    try:
        validation.fact_key(key)
    except validation.InvalidInput:
        return False
    return True


def _run(session: GraphRecorder, token: AgentToken, specs: list) -> tuple[list[int], list[list[dict]]]:
    ids: list[int] = []
    results: list[list[dict]] = []
    stack: list[tuple[str, dict, int]] = []  # handoffs waiting to be opened: (agent, payload, parent index)
    for i, (agent, payload, parent, ops) in enumerate(specs):
        try:
            agent, payload = _open(session, token, i, agent, payload, parent, stack)
        except CALL_ERRORS as exc:
            raise BatchCallFailed(exc, action=i, call=None, op=None) from exc
        aid, seq = session.allocate_action()
        record = ActionRecord(id=aid, agent=agent, payload=payload, seq=seq,
                              parent=ids[parent] if parent is not None else None, ticket=payload.get("ticket"))
        rec, keys, answers = ActionRecorder(session, record), {}, []
        for j, (op, body) in enumerate(ops):
            try:
                if op == "finish":
                    protocol.finish(record, body)
                    answers.append({"action": aid, "dhash": record.dhash})
                else:
                    answers.append(protocol.apply_op(rec, record, op, body, perform=True, keys=keys))
            except CALL_ERRORS as exc:
                raise BatchCallFailed(exc, action=i, call=j, op=op, action_id=aid) from exc
        session.commit(record, status="ok", root=record.parent is None)
        ids.append(aid)
        results.append(answers)
        stack.extend((a, p, i) for a, p in reversed(record.handoffs))
    if stack:
        agent, _, parent = stack[-1]
        raise BatchCallFailed(CallConflict(f"the handoff to {agent!r} of action {parent} was never recorded; a "
                                           f"finished recording includes every action it hands off"),
                              action=len(specs), call=None, op=None)
    return ids, results


def _open(session, token, i, agent, payload, parent, stack) -> tuple[str, dict]:
    if parent is None:
        if stack:
            want_agent, _, want_parent = stack[-1]
            raise CallConflict(f"the next action is the handoff to {want_agent!r} from action {want_parent}, "
                               f"as the in-process recorder would run it, not a new root")
        payload = validation.payload(payload, field=f"{agent} payload")
        return remote._resolve_agent(session, token, agent), payload
    if not stack:
        raise CallConflict("no handoff is waiting to be opened here")
    want_agent, want_payload, want_parent = stack[-1]
    if parent != want_parent or agent != want_agent:
        raise CallConflict(f"the next action is the handoff to {want_agent!r} from action {want_parent}, "
                           f"as the in-process recorder would run it")
    if payload is not None and payload != want_payload:
        raise InvalidCall("payload differs from the payload the handoff recorded")
    remote._resolve_agent(session, token, agent)
    stack.pop()
    return agent, want_payload
