"""Services that record agents running in other processes, call by call over HTTP (or MCP).

A recording is one root action and everything it hands off, as RecordingSession.run_root records
them in-process: actions are opened in the same depth-first order (the next handed-off action to open
is the last unopened handoff of the latest finished action), each gets its id and seq when opened, and
its reads resolve against the workspace's memory plus what the recording's finished actions wrote.

What reaches the graph, and when: nothing until the recording's last action finishes. Then the whole
recording is written in one flush under the workspace lock, after checking that every read still
resolves to the fact it returned (a repair or another writer in between refuses the recording, with
nothing written). A recording that is abandoned (DELETE) or idle for KINTSUGI_RECORDING_TIMEOUT_SECONDS
writes nothing to the graph; its row stays, `abandoned` or `expired`, with the effects it announced,
and the expiry lands in the audit record, because an agent may have performed those effects.

One recording is open per workspace at a time, as the in-process recorder holds the workspace for a
whole root action: another root waits for it (409 recording_in_progress, with the time to retry).
"""
from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core import audit
from core.vocabulary import AuditAction, RecordingStatus, Via
from provenance import protocol, validation
from provenance.agents import registered_names
from provenance.graph import workspace_graph
from provenance.models import AgentToken, Recording, Workspace
from provenance.protocol import CallConflict, dump_record, load_record
from provenance.recorder import ActionRecord, Recorder, RecordingSession
from provenance.services import workspace_lock



class RecordingInProgress(CallConflict):
    """Another recording of the workspace is open; retry after `retry_after` seconds."""

    code = "recording_in_progress"

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after

    def details(self):
        return {"retry_after": self.retry_after}


class RecordingClosed(CallConflict):
    pass


class UnknownAction(LookupError):
    pass


def _timeout() -> timedelta:
    return timedelta(seconds=settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS)


# --- the rebuilt session, cached per process ---------------------------------------------------------------
# Rebuilding a session reads the workspace's facts from the graph; the next call of the same recording
# in the same process reuses it when the row's version says nothing happened elsewhere since.
_cache: OrderedDict[int, tuple[int, RecordingSession]] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 32


class _Sources(dict):
    """A workspace's sources, each read from Postgres when an action first ingests it."""

    def __init__(self, ws: Workspace):
        super().__init__()
        self._ws = ws

    def __missing__(self, source_id: str) -> str:
        content = self._ws.sources.filter(source_id=source_id).values_list("content", flat=True).first()
        if content is None:
            raise KeyError(source_id)
        self[source_id] = content
        return content


def _new_session(ws: Workspace) -> RecordingSession:
    return RecordingSession(graph=workspace_graph(ws.name), workspace=ws.name, effects="live",
                            run_number=ws.run_number, sources=_Sources(ws), load="by_key")


def _session(row: Recording) -> RecordingSession:
    with _cache_lock:
        cached = _cache.pop(row.pk, None)
    if cached and cached[0] == row.version:
        return cached[1]
    session = _new_session(row.workspace)
    if list(session._loaded_ids) != row.state["base"]:
        raise CallConflict("the workspace's graph changed since this recording was opened (a repair or a desk run "
                           "wrote it); record the root action again")
    scratch: defaultdict[str, list] = defaultdict(list)
    for data in row.state["records"]:
        if data["dhash"] is not None:
            session.commit(load_record(data), status="ok", root=data["parent"] is None, sink=scratch)
    session._outgoing.clear()  # a staging session never dispatches; the commit's own session does
    session.next_action, session.next_seq = row.state["next_action"], row.state["next_seq"]
    return session


def _remember(row: Recording, session: RecordingSession) -> None:
    with _cache_lock:
        _cache[row.pk] = (row.version, session)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def _forget(row: Recording) -> None:
    with _cache_lock:
        _cache.pop(row.pk, None)


# --- opening ------------------------------------------------------------------------------------------------
def _expire_idle(ws: Workspace) -> None:
    """Close the workspace's open recording if it has been idle too long (nothing of it is in the graph)."""
    row = Recording.objects.select_for_update().filter(workspace=ws, status=RecordingStatus.OPEN).first()
    if row is not None and row.touched_at < timezone.now() - _timeout():
        _close(row, RecordingStatus.EXPIRED, actor=None, reason=f"idle for over {settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS}s",
               via=Via.WORKER)


def _close(row: Recording, status: str, *, actor, reason: str, via: str) -> None:
    announced = [e | {"action": r["id"]} for r in row.state["records"] for e in r["effects"]]
    row.status, row.finished_at = status, timezone.now()
    row.save(update_fields=["status", "finished_at"])
    _forget(row)
    audit.record(action=AuditAction.of_recording(status), subject_type="recording", subject_id=row.pk, via=via, actor=actor,
                 reason=reason, workspace=row.workspace,
                 data={"actions": len(row.state["records"]), "effects_announced": announced[:50],
                       "effects_count": len(announced)})


def _skip_closed_ids(ws: Workspace, session: RecordingSession) -> None:
    """Never hand out again an action id an abandoned or expired recording had: a late call from its
    agent must find that recording closed, not land in a stranger's."""
    last = (Recording.objects.filter(workspace=ws, status__in=(RecordingStatus.ABANDONED, RecordingStatus.EXPIRED)).order_by("-first_action")
            .values_list("state", flat=True).first())
    if last and last["next_action"] > session.next_action:
        session.next_action = last["next_action"]
        session.next_seq = max(session.next_seq, float(session.next_action))


def _resolve_agent(session: RecordingSession, token: AgentToken, agent) -> str:
    if not isinstance(agent, str):
        raise protocol.InvalidCall("agent must be a string")
    if agent in registered_names():
        raise protocol.InvalidCall(f"{agent!r} is an in-process agent here, re-run in-process; an agent in another "
                                   f"process records under a name the workspace registered for it")
    session.agent(agent)  # UnknownAgent: not registered in this workspace
    if not token.allows(agent):
        raise PermissionError(f"this token may not record as agent {agent!r}")
    return agent


def open_action(*, token: AgentToken, agent, payload=None, parent=None) -> dict:
    """Open a root action (no parent) or the next handed-off one (parent: the handing-off action's id)."""
    ws = token.workspace
    with transaction.atomic():
        if parent is None:
            payload = validation.payload(payload, field=f"{agent} payload")
            _expire_idle(ws)
            session = _new_session(ws)
            agent = _resolve_agent(session, token, agent)
            _skip_closed_ids(ws, session)
            aid, seq = session.allocate_action()
            state = {"base": list(session._loaded_ids), "records": [], "keys": {}, "open": aid, "stack": [],
                     "next_action": session.next_action, "next_seq": session.next_seq}
            try:
                with transaction.atomic():
                    row = Recording.objects.create(workspace=ws, token=token, state=state, first_action=aid,
                                                   touched_at=timezone.now())
            except IntegrityError:
                busy = Recording.objects.filter(workspace=ws, status=RecordingStatus.OPEN).values_list("touched_at", flat=True).first()
                wait = int(((busy + _timeout()) - timezone.now()).total_seconds()) + 1 if busy else 1
                raise RecordingInProgress(f"another recording of workspace {ws.name!r} is open; its agent is "
                                          f"still recording (retry shortly)", max(wait, 1)) from None
        else:
            row = _locked_row(token, parent)
            session = _session(row)
            state = row.state
            if state["open"] is not None:
                raise CallConflict(f"action {state['open']} is still open; finish it before opening its handoffs")
            if not state["stack"]:
                raise CallConflict("no handoff is waiting to be opened in this recording")
            want_agent, want_payload, want_parent = state["stack"][-1]
            if parent != want_parent or agent != want_agent:
                raise CallConflict(f"the next action to open is the handoff to {want_agent!r} from action "
                                   f"{want_parent}, as the in-process recorder would run it")
            if payload is not None and payload != want_payload:
                raise protocol.InvalidCall("payload differs from the payload the handoff recorded")
            _resolve_agent(session, token, agent)
            payload = want_payload
            state["stack"].pop()
            aid, seq = session.allocate_action()
            state.update(open=aid, next_action=session.next_action, next_seq=session.next_seq)
        record = ActionRecord(id=aid, agent=agent, payload=payload, seq=seq, parent=parent,
                              ticket=payload.get("ticket"))
        state["records"].append(dump_record(record))
        _save(row, session)
    return {"action": aid, "seq": seq, "recording": row.pk, "agent": agent, "payload": payload,
            "parent": parent, "replay": False}


def _locked_row(token: AgentToken, action_id) -> Recording:
    if isinstance(action_id, bool) or not isinstance(action_id, int):
        raise protocol.InvalidCall("action must be an integer id")
    row = (Recording.objects.select_for_update().select_related("workspace")
           .filter(workspace=token.workspace, status=RecordingStatus.OPEN, first_action__lte=action_id).order_by("-first_action")
           .first())
    if row is None or not any(r["id"] == action_id for r in row.state["records"]):
        closed = (Recording.objects.filter(workspace=token.workspace, first_action__lte=action_id)
                  .exclude(status=RecordingStatus.OPEN).order_by("-first_action").first())
        if closed is not None and any(r["id"] == action_id for r in closed.state["records"]):
            raise RecordingClosed(f"action {action_id} belongs to a recording that is {closed.status}")
        raise UnknownAction(f"no open action {action_id} in workspace {token.workspace.name!r}")
    if row.touched_at < timezone.now() - _timeout():
        # Closed (and audited) by the next root opened in the workspace: this transaction rolls back.
        raise RecordingClosed(f"action {action_id} belongs to a recording that expired (idle for over "
                              f"{settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS}s); nothing of it was recorded")
    return row


def _save(row: Recording, session: RecordingSession) -> None:
    row.version += 1
    row.touched_at = timezone.now()
    row.save(update_fields=["state", "version", "touched_at"])
    transaction.on_commit(lambda: _remember(row, session))


def _open_record(row: Recording, token: AgentToken, action_id: int) -> tuple[int, ActionRecord]:
    if row.state["open"] != action_id:
        raise CallConflict(f"action {action_id} is finished; only action {row.state['open']} is open")
    index = next(i for i, r in enumerate(row.state["records"]) if r["id"] == action_id)
    record = load_record(row.state["records"][index])
    if not token.allows(record.agent):
        raise PermissionError(f"this token may not record as agent {record.agent!r}")
    return index, record


# --- calls --------------------------------------------------------------------------------------------------
def call(*, token: AgentToken, action_id, op: str, body) -> dict:
    """One memory, source, handoff or effect call of an open action."""
    with transaction.atomic():
        row = _locked_row(token, action_id)
        session = _session(row)
        index, record = _open_record(row, token, action_id)
        keys = row.state["keys"].setdefault(str(action_id), {})
        answer = protocol.apply_op(Recorder(session, record), record, op, body, perform=True, keys=keys)
        row.state["records"][index] = dump_record(record)
        _save(row, session)
    return answer


def finish_action(*, token: AgentToken, action_id, body) -> dict:
    """Finish the open action with its decision; the recording's last action commits it to the graph."""
    with transaction.atomic():
        row = _locked_row(token, action_id)
        session = _session(row)
        index, record = _open_record(row, token, action_id)
        protocol.finish(record, body)
        row.state["records"][index] = dump_record(record)
        session.commit(record, status="ok", root=record.parent is None, sink=defaultdict(list))
        session._outgoing.clear()
        row.state["stack"].extend([a, p, record.id] for a, p in reversed(record.handoffs))
        row.state["open"] = None
        answer = {"action": record.id, "dhash": record.dhash, "recording": row.pk}
        if row.state["stack"]:
            agent, payload, parent = row.state["stack"][-1]
            _save(row, session)
            return answer | {"committed": False, "next": {"agent": agent, "parent": parent, "payload": payload}}
        ids = _commit(row)
    return answer | {"committed": True, "next": None, "actions": ids}


def _commit(row: Recording) -> list[int]:
    """Write the finished recording to the graph, as record_root does: all of it or nothing."""
    ws = Workspace.objects.select_for_update().get(pk=row.workspace_id)
    workspace_lock(ws)
    session = _new_session(ws)
    if list(session._loaded_ids) != row.state["base"]:
        _close(row, RecordingStatus.ABANDONED, actor=None, reason="the graph changed while it was recorded", via=Via.WORKER)
        raise CallConflict("the workspace's graph changed while this recording was open (a repair or a desk run "
                           "wrote it); nothing of it was recorded: record the root action again")
    records = [load_record(r) for r in row.state["records"]]
    try:
        for record in records:
            for read in record.reads:
                fv = session.facts.resolve(read.key, record.seq, record.id)
                if (fv.id if fv else None) != read.fact_id:
                    raise CallConflict(f"memory changed under action {record.id}: {read.key!r} no longer resolves "
                                       f"to what it read; record the root action again")
            session.commit(record, status="ok", root=record.parent is None)
        session.flush()
    except BaseException:
        session.discard()
        raise
    ws.action_count += len(records)
    ws.save(update_fields=["action_count"])
    row.status, row.finished_at = RecordingStatus.COMMITTED, timezone.now()
    row.version += 1
    row.save(update_fields=["status", "finished_at", "version"])
    _forget(row)
    return [r.id for r in records]


def abandon(*, token: AgentToken, action_id, reason: str) -> dict:
    """Drop the open recording that holds `action_id`: nothing of it reaches the graph."""
    reason = validation.reason(reason)
    with transaction.atomic():
        row = _locked_row(token, action_id)
        _close(row, RecordingStatus.ABANDONED, actor=None, reason=f"{token.label}: {reason}", via=Via.API)
    return {"recording": row.pk, "status": row.status, "actions": len(row.state["records"])}


def describe(*, token: AgentToken, action_id) -> dict:
    with transaction.atomic():
        row = _locked_row(token, action_id)
        data = next(r for r in row.state["records"] if r["id"] == action_id)
    return {"action": action_id, "recording": row.pk, "agent": data["agent"], "payload": data["payload"],
            "parent": data["parent"], "seq": data["seq"], "finished": data["dhash"] is not None,
            "open": row.state["open"], "next": ({"agent": row.state["stack"][-1][0], "parent": row.state["stack"][-1][2]}
                                                 if row.state["stack"] else None)}
