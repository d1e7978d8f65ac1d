"""Services that record agents running in other processes, call by call over HTTP (or MCP).

A recording is one root action and everything it hands off, as GraphRecorder.run_root records
them in-process: actions are opened in the same depth-first order (the next handed-off action to open
is the last unopened handoff of the latest finished action), each gets its id and seq when opened, and
its reads resolve against the workspace's memory plus what the recording's finished actions wrote.

What reaches the graph, and when: nothing until the recording's last action finishes. Then the whole
recording is committed as provenance.recording.live commits an in-process one: its reads resolved against the
snapshot it opened on plus its own writes, its ids are provisional until the commit numbers it after
everything committed so far, under the workspace graph's lock for one short flush. A repair that retired
a fact it read meanwhile refuses it, with nothing written. A recording that is abandoned (DELETE) or idle for KINTSUGI_RECORDING_TIMEOUT_SECONDS
writes nothing to the graph; its row stays, `abandoned` or `expired`, with the effects it announced,
and the expiry lands in the audit record, because an agent may have performed those effects.

Any number of recordings of a workspace are open at once; the provisional action ids of open ones
never overlap (each action opens above every id a recording of the workspace was handed, open, committed,
abandoned or expired: the counter on the workspace's row), so a call's action id names its recording.

Where an open recording lives (provenance.recording.staging): its row in Postgres is written when an action opens,
when an effect is recorded (durable before the agent may perform it) and when it closes; the calls that
only stage (set, get, handoff, a finish that does not commit) are written to its staged state in Redis by
one atomic script, with no Postgres transaction, against the process's copy of its session (or a copy of
what is staged, in a process that holds none).
"""
from __future__ import annotations

import time
import uuid
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.audit import trail
from core.vocabulary import AuditAction, RecordingStatus, Via
from provenance.recording import protocol, quarantine, staging
from provenance.graph import queries, top_ids
from provenance import validation
from provenance.agents import registered_names
from provenance.graph.graph import workspace_graph
from provenance.models import AgentToken, Recording, Workspace
from provenance.recording.protocol import CallConflict, dump_record, load_record
from provenance.recording.live import LazySources, read_ended, write_records
from provenance.recording.recorder import ActionRecord, ActionRecorder, GraphRecorder
# The session a web process keeps of each open recording (tests reach _cache through this module).
from provenance.recording.recording_copies import (  # noqa: F401
    _by_action, _cache, _cache_lock, _forget, _new_session, _on_snapshot, _remember, _session, _snapshot,
    copy_from_staging, refreshed)
from provenance.recording.services import workspace_lock


class RecordingClosed(CallConflict):
    pass


class UnknownAction(LookupError):
    pass


def _timeout() -> timedelta:
    return timedelta(seconds=settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS)


# --- opening ------------------------------------------------------------------------------------------------
def _expire_idle(ws: Workspace) -> None:
    """Close the workspace's open recordings idle too long (nothing of them is in the graph)."""
    idle = Recording.objects.select_for_update(skip_locked=True).filter(
        workspace=ws, status=RecordingStatus.OPEN, touched_at__lt=timezone.now() - _timeout())
    now = time.time()
    for row in idle:
        touched = staging.touched(row)
        if touched is not None and touched > now - settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS:
            continue  # its calls are staged: it is not idle
        _close(row, RecordingStatus.EXPIRED, actor=None, reason=f"idle for over {settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS}s",
               via=Via.WORKER)


def _close(row: Recording, status: str, *, actor, reason: str, via: str) -> None:
    announced = [e | {"action": r["id"]} for r in row.state["records"] for e in r["effects"]]
    row.status, row.finished_at = status, timezone.now()
    row.save(update_fields=["status", "finished_at"])
    _forget(row)
    transaction.on_commit(lambda: staging.drop(row))
    trail.record(action=AuditAction.of_recording(status), subject_type="recording", subject_id=row.pk, via=via, actor=actor,
                 reason=reason, workspace=row.workspace,
                 data={"actions": len(row.state["records"]), "effects_announced": announced[:50],
                       "effects_count": len(announced)})


def _allocate(ws: Workspace, session: GraphRecorder) -> tuple[int, float]:
    """The next provisional action id (and seq) of an open recording, under the workspace's row lock:
    above the graph's and above every provisional id any recording of the workspace had, so a (late)
    call's action id names its own recording, never a stranger's."""
    locked = Workspace.objects.select_for_update().only("name", "next_provisional_action").get(pk=ws.pk)
    number_provisionally(locked, session)
    allocated = session.allocate_action()
    locked.next_provisional_action = session.next_action
    locked.save(update_fields=["next_provisional_action"])
    return allocated


def number_provisionally(ws: Workspace, session: GraphRecorder) -> None:
    """Number `session`'s next action above the graph's and above every provisional id any recording of
    the workspace had (open, committed, abandoned or expired), so no id is handed out twice. `ws`: the
    workspace's row read under its lock; the caller stores the session's next action in it before the
    lock goes (Workspace.next_provisional_action)."""
    top = top_ids.max_ids(workspace_graph(ws.name)).action or 0
    session.next_action = max(top + 1, ws.next_provisional_action)
    session.next_seq = float(session.next_action)


def _resolve_agent(session: GraphRecorder, token: AgentToken, agent) -> str:
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
            state = {"base": list(session._loaded_ids), "snapshot": session.next_seq, "run_number": ws.run_number,
                     "records": [], "keys": {}, "stack": [], "staged": uuid.uuid4().hex}
            session = _on_snapshot(session, state)
            agent = _resolve_agent(session, token, agent)
            aid, seq = _allocate(ws, session)
            state.update(open=aid, next_action=session.next_action, next_seq=session.next_seq)
            row = Recording.objects.create(workspace=ws, token=token, state=state, first_action=aid,
                                           touched_at=timezone.now())
            transaction.on_commit(lambda: _release(row, ""))
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
            aid, seq = _allocate(row.workspace, session)
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
    holding = {"state__records__contains": [{"id": action_id}]}
    # Only the recording's row: FOR UPDATE over the join would lock the workspace's row too, before the
    # commit takes the graph's lock (the lock order is the graph's, then the workspace's row), and a flag
    # holding the graph's lock deadlocked with it at its own commit.
    row = (Recording.objects.select_for_update(of=("self",)).select_related("workspace")
           .filter(workspace=token.workspace, status=RecordingStatus.OPEN, first_action__lte=action_id, **holding).first())
    if row is None:
        closed = (Recording.objects.filter(workspace=token.workspace, first_action__lte=action_id, **holding)
                  .exclude(status=RecordingStatus.OPEN).order_by("-first_action").first())
        if closed is not None:
            raise RecordingClosed(f"action {action_id} belongs to a recording that is {closed.status}")
        raise UnknownAction(f"no open action {action_id} in workspace {token.workspace.name!r}")
    fence, staged = staging.claim(row)  # no staged call lands until this transaction is over
    if staged is None and row.state.get("staged"):
        raise RecordingClosed(f"the calls staged for the recording holding action {action_id} were lost (the "
                              f"staging store was emptied); nothing of it will be recorded: record it again")
    if staged is not None and staged.version > row.version:
        row.state, row.version = staged.state, staged.version
    row.staged_touched = staged.touched if staged is not None else 0.0
    transaction.on_commit(lambda: _release(row, fence))
    if max(row.touched_at.timestamp(), row.staged_touched) < time.time() - _timeout().total_seconds():
        # Closed (and audited) by the next root opened in the workspace: this transaction rolls back.
        raise RecordingClosed(f"action {action_id} belongs to a recording that expired (idle for over "
                              f"{settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS}s); nothing of it was recorded")
    return row


def _release(row: Recording, fence: str) -> None:
    """After the row's transaction: publish its state as staged (or drop it, closed) and lower the fence."""
    if row.status != RecordingStatus.OPEN:
        staging.drop(row)
        return
    staging.release(row, version=row.version, state=row.state, token=fence)


def _save(row: Recording, session: GraphRecorder) -> None:
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


def _count_quarantined(row: Recording, session: GraphRecorder, agent: str) -> None:
    if session.quarantine_hits:
        quarantine.record_attempts(workspace=row.workspace_id, hits=session.quarantine_hits, via=Via.API, agent=agent)
        session.quarantine_hits = []


# --- calls --------------------------------------------------------------------------------------------------
STAGED_OPS = ("get", "set", "handoff", "finish")  # ingest counts quarantine hits and effect must be durable: the row


def call(*, token: AgentToken, action_id, op: str, body) -> dict:
    """One memory, source, handoff or effect call of an open action."""
    answer = staged_call(token=token, action_id=action_id, op=op, body=body)
    if answer is not None:
        return answer
    with transaction.atomic():
        row = _locked_row(token, action_id)
        session = _session(row)
        answer = apply_call(row, session, token=token, action_id=action_id, op=op, body=body)
        _save(row, session)
    return answer


def staged_call(*, token: AgentToken, action_id, op: str, body) -> dict | None:
    """The call applied to this process's copy of its recording (or one made from what is staged) and staged
    (provenance.recording.staging) with no row lock and no Postgres statement: it lands only if the staged
    version is still the copy's (else the copy is brought up to it, once), no writer holds the row and the
    recording is not idle. None when nothing is staged of it, the call is not one that only stages (an
    effect, an ingest, the finish that commits), or it did not land, or it failed: the caller then applies
    it to the row read under its lock, which answers with the authoritative result or error."""
    if op not in STAGED_OPS or isinstance(action_id, bool) or not isinstance(action_id, int):
        return None
    with _cache_lock:
        pk = _by_action.get((token.workspace_id, action_id))
        cached = _cache.pop(pk, None) if pk is not None else None
    if cached is None:
        cached = copy_from_staging(token, action_id)
        if cached is None:
            return None
    version, session, row = cached
    for attempt in range(2):
        touched = max(row.touched_at.timestamp(), getattr(row, "staged_touched", 0.0))
        if row.workspace_id != token.workspace_id or touched < time.time() - _timeout().total_seconds():
            _remember(row, session)  # untouched: the locked path's _session finds it
            return None  # idle since its last call: the locked path closes it
        try:
            index, record = _open_record(row, token, action_id)
        except Exception:  # noqa: BLE001 - answered by the locked path, from the row as it stands
            _remember(row, session)
            return None
        if op == "finish" and not (record.handoffs or row.state["stack"]):
            _remember(row, session)  # a finish that commits takes the row's lock: the copy is handed back for it
            return None
        if op == "finish" and attempt == 0 and staging.version(row) != version:
            # A finish commits its action into the session, which a stale copy could not take back: caught up first.
            staged = staging.read(row)
            if staged is None:
                _remember(row, session)
                return None
            row, session, version = refreshed(row, session, staged)
            continue
        try:
            answer = (apply_finish(row, session, token=token, action_id=action_id, body=body, save=False)
                      if op == "finish" else
                      apply_call(row, session, token=token, action_id=action_id, op=op, body=body))
        except Exception:  # noqa: BLE001 - answered by the locked path, from the row as it stands
            return None  # the copy may hold part of the call: dropped, the locked path rebuilds it
        # A set, get or handoff changed only its action's record (apply_call): only that is written.
        landed = staging.stage(row, version=version, state=row.state,
                               record=None if op == "finish" else row.state["records"][index])
        if landed == staging.WRITTEN:
            row.version, row.staged_touched = version + 1, time.time()
            _remember(row, session)
            return answer
        staged = staging.read(row) if landed == staging.STALE and attempt == 0 else None
        if staged is None:
            return None  # a writer holds the row, the recording is idle or closed: the locked path says which
        # Another process staged a call since this copy was made: the copy is brought up to what is staged
        # (a set, get or handoff tried on it changed its state, not its session), else rebuilt from it.
        row, session, version = refreshed(row, session, staged, rebuild=op == "finish")
    return None


def finish_action(*, token: AgentToken, action_id, body) -> dict:
    """Finish the open action with its decision; the recording's last action commits it to the graph."""
    answer = staged_call(token=token, action_id=action_id, op="finish", body=body)
    if answer is not None:
        return answer
    with transaction.atomic():
        row = _locked_row(token, action_id)
        return apply_finish(row, None, token=token, action_id=action_id, body=body)


def apply_call(row: Recording, session: GraphRecorder, *, token: AgentToken, action_id, op: str, body) -> dict:
    """A call applied to the locked recording `row` and its session; the caller saves the row."""
    index, record = _open_record(row, token, action_id)
    keys = row.state["keys"].setdefault(str(action_id), {})
    if op == "ingest":
        session.quarantined = quarantine.held(workspace=row.workspace_id)
    answer = protocol.apply_op(ActionRecorder(session, record), record, op, body, perform=True, keys=keys)
    _count_quarantined(row, session, record.agent)
    row.state["records"][index] = dump_record(record)
    return answer


def apply_finish(row: Recording, session: GraphRecorder | None, *, token: AgentToken, action_id, body,
                 save: bool = True) -> dict:
    """Finish the action in the locked recording `row`: saves the row (unless `save` is false: a finish
    that hands off, staged), or commits the whole recording. `session`: the recording's session, None to
    build it only if the finish does not commit (the commit writes the recording from its row)."""
    index, record = _open_record(row, token, action_id)
    commits = not (record.handoffs or row.state["stack"])
    if session is None and not commits:
        session = _session(row)  # of the row as it stands, before this finish
    protocol.finish(record, body)
    row.state["records"][index] = dump_record(record)
    if not commits:
        session.commit(record, status="ok", root=record.parent is None, sink=defaultdict(list))
        session._outgoing.clear()
    row.state["stack"].extend([a, p, record.id] for a, p in reversed(record.handoffs))
    row.state["open"] = None
    answer = {"action": record.id, "dhash": record.dhash, "recording": row.pk}
    if row.state["stack"]:
        agent, payload, parent = row.state["stack"][-1]
        if save:
            _save(row, session)
        return answer | {"committed": False, "next": {"agent": agent, "parent": parent, "payload": payload}}
    ids = _commit(row)
    return answer | {"committed": True, "next": None, "actions": ids}


def _commit(row: Recording) -> list[int]:
    """Write the finished recording to the graph, as provenance.recording.live commits an in-process one: all of
    it or nothing, numbered after everything committed so far. Postgres: the graph's lock with the
    workspace's count (provenance.recording.services.workspace_lock), then the row closed."""
    ws, records = row.workspace, [load_record(r) for r in row.state["records"]]  # ws: read with the row
    # A repair applying is waited for; the run number is read again under the lock.
    run_number = workspace_lock(ws, wait_seconds=600, add_actions=len(records))
    base, made, ids = row.state["base"], [], None
    if run_number == row.state.get("run_number", run_number) and not read_ended(records):
        ids = write_records(graph=workspace_graph(ws.name), workspace=ws.name, run_number=run_number,
                            sources=LazySources(ws), records=records, first=(row.first_action, base[1] + 1, base[2] + 1),
                            snapshot=_snapshot(row.state), effect_ids=made)
    if ids is None:  # nothing written
        _close(row, RecordingStatus.ABANDONED, actor=None, reason="the graph changed while it was recorded", via=Via.WORKER)
        raise CallConflict("memory this recording read was repaired (or the desk replaced) while it was open; "
                           "nothing of it was recorded: record the root action again")
    # The agent's own idempotency key of each effect, by the effect's final id: what a compensation of
    # that effect names when it reaches the team again (effect_keys below).
    row.state["effect_keys"] = {str(made[i][index]): key for i, record in enumerate(records)
                                for key, index in row.state["keys"].get(str(record.id), {}).items()}
    row.status, row.finished_at = RecordingStatus.COMMITTED, timezone.now()
    row.version += 1
    row.save(update_fields=["status", "finished_at", "version", "state"])
    _forget(row)
    return ids


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
