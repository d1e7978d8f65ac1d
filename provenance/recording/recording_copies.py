"""An open HTTP recording's session as a web process keeps it between calls: the session rebuilt from the
recording's state (its snapshot, its finished actions) and reused by the next call of the same recording in
the same process while the state's version says nothing happened elsewhere since (provenance.recording.remote)."""
from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from datetime import datetime, timezone as dt_timezone

from core.vocabulary import RecordingStatus
from provenance.graph.graph import workspace_graph
from provenance.recording import staging
from provenance.recording.live import LazySources, snapshot_facts
from provenance.models import Recording, Workspace
from provenance.recording.protocol import load_record
from provenance.recording.recorder import GraphRecorder

# Rebuilding a session reads the workspace's facts from the graph; the next call of the same recording
# in the same process reuses it when the row's version says nothing happened elsewhere since. The row
# is kept with it, so a call can be applied to both without reading the row again (provenance.recording.remote's staged calls).
_cache: OrderedDict[int, tuple[int, GraphRecorder, Recording]] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 256
# (workspace id, action id) -> the recording's pk, for the recordings in _cache. Action ids are never
# handed out twice in a workspace, so an entry never turns wrong; it only outlives its cache entry.
_by_action: dict[tuple[int, int], int] = {}


def _new_session(ws: Workspace) -> GraphRecorder:
    return GraphRecorder(graph=workspace_graph(ws.name), workspace=ws.name, effects="live",
                            run_number=ws.run_number, sources=LazySources(ws), load="by_key")


def _snapshot(state: dict) -> float:
    return state.get("snapshot", float(state["base"][0] + 1))


def _on_snapshot(session: GraphRecorder, state: dict) -> GraphRecorder:
    """Number the session's new facts and effects as the recording's provisional ones and let its reads
    see the snapshot it opened on, whatever committed since."""
    session._loaded_ids = tuple(state["base"])
    session.number_from(*(i + 1 for i in state["base"]))
    session.facts = snapshot_facts(session.graph, _snapshot(state))
    return session


def _session(row: Recording) -> GraphRecorder:
    with _cache_lock:
        cached = _cache.pop(row.pk, None)
    if cached and cached[0] == row.version:
        return cached[1]
    if cached and cached[0] < row.version and caught_up(cached[1], cached[2].state, row.state):
        return cached[1]  # another worker's calls since: the copy brought up to them, not rebuilt
    session = _on_snapshot(_new_session(row.workspace), row.state)
    scratch: defaultdict[str, list] = defaultdict(list)
    finished = [load_record(data) for data in row.state["records"] if data["dhash"] is not None]
    session.facts.prefetch(w["key"] for record in finished for w in record.writes)
    for record in finished:
        session.commit(record, status="ok", root=record.parent is None, sink=scratch)
    session._outgoing.clear()  # a staging session never dispatches; the commit's own session does
    session.next_action, session.next_seq = row.state["next_action"], row.state["next_seq"]
    return session


def caught_up(session: GraphRecorder, old: dict, new: dict) -> bool:
    """Bring `session`, built from the recording's state `old`, to its later state `new` when `new` only
    adds to `old` (calls of the open action, actions finished after those it holds): the actions finished
    since are committed to it, as _session commits them all. False: `new` is not such a state, rebuild.
    What another web process staged is most often a call or two of the open action, which the session
    does not hold (its action's record is in the state): then nothing is read from the graph."""
    held = [data["id"] for data in old["records"] if data["dhash"] is not None]
    finished = [data for data in new["records"] if data["dhash"] is not None]
    if [data["id"] for data in finished[:len(held)]] != held or old["base"] != new["base"] or \
            _snapshot(old) != _snapshot(new):
        return False
    added = [load_record(data) for data in finished[len(held):]]
    if added:
        session.facts.prefetch(w["key"] for record in added for w in record.writes)
        scratch: defaultdict[str, list] = defaultdict(list)
        for record in added:
            session.commit(record, status="ok", root=record.parent is None, sink=scratch)
        session._outgoing.clear()
    session.next_action, session.next_seq = new["next_action"], new["next_seq"]
    return True


def refreshed(row: Recording, session: GraphRecorder, staged: staging.Staged, *,
               rebuild: bool = False) -> tuple[Recording, GraphRecorder, int]:
    """The copy (row, session) brought up to `staged`, what another process staged since it was made;
    rebuilt from it when it cannot be (or `rebuild`: the session took a call that did not land)."""
    fresh = not rebuild and caught_up(session, row.state, staged.state)
    row = Recording(**{f.attname: getattr(row, f.attname) for f in Recording._meta.concrete_fields})
    row.state, row.version = staged.state, staged.version
    row.staged_touched = staged.touched
    return row, (session if fresh else _session(row)), staged.version


def copy_from_staging(token, action_id: int) -> tuple[int, GraphRecorder, Recording] | None:
    """A copy of the open recording holding `action_id` made from what is staged of it, for a web process
    that holds none (its earlier calls reached other workers): its session rebuilt as _session rebuilds
    one, from the graph, with no Postgres statement. None: not staged, or a writer holds it."""
    located = staging.locate(token.workspace_id, action_id)
    if located is None:
        return None
    staged = located.staged
    row = Recording(pk=located.pk, workspace=token.workspace, state=staged.state, version=staged.version,
                    first_action=staged.state["records"][0]["id"], status=RecordingStatus.OPEN,
                    touched_at=datetime.fromtimestamp(staged.row_touched, tz=dt_timezone.utc))
    row.staged_touched = staged.touched
    return staged.version, _session(row), row


def _remember(row: Recording, session: GraphRecorder) -> None:
    with _cache_lock:
        _cache[row.pk] = (row.version, session, row)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        if len(_by_action) > 16 * CACHE_SIZE:
            _by_action.clear()
        for data in row.state["records"]:
            _by_action[(row.workspace_id, data["id"])] = row.pk


def _forget(row: Recording) -> None:
    with _cache_lock:
        _cache.pop(row.pk, None)
