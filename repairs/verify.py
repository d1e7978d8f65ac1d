"""Verification: re-execute the workspace's root actions without the flagged sources into the baseline
graph, then diff the repaired workspace against it (active facts, ticket decisions, live effects)."""
from __future__ import annotations

import bisect
import json
import os
import socket
import time
from collections import Counter

from django.conf import settings

from core import locks
from core.locks import advisory_lock
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.recording.recorder import GraphRecorder
from provenance.recording.selectors import export_state
from repairs.faults import fault_point


def record_baseline(*, workspace: Workspace, excluded: set[str], below: float | None = None,
                    cost: dict | None = None) -> int:
    """Record the clean baseline run of the roots below the seq `below` (all of them without it);
    returns its action count (and notes its replay calls to remote agents in `cost`). Model answers come
    from the cache."""
    graph = workspace_graph(workspace.name)
    baseline = workspace_graph(workspace.name, baseline=True)
    baseline.delete()
    # Every root runs, a flagged source's ingest answering None: a clean run. (A root that only carried
    # the source into memory then writes nothing, which is what the repair's masking of it leaves.)
    session = GraphRecorder(graph=baseline, workspace=workspace.name,
                               sources=dict(workspace.sources.values_list("source_id", "content")),
                               effects="sandbox", excluded_sources=excluded, load=False)
    calls = counted_replays(session)
    originals: list[float] = []  # the recorded roots' seqs, in order, and where each began here
    starts: list[float] = []
    for root in graph.ro_query(queries.ROOT_ACTIONS):
        if below is not None and root.seq >= below:
            continue
        snapshot = None
        if root.snap is not None:
            # Recorded beside others: hide from it here the same roots its snapshot lacked.
            first_unseen = bisect.bisect_left(originals, root.snap)
            if first_unseen < len(starts):
                snapshot = starts[first_unseen]
        originals.append(root.seq)
        starts.append(session.next_seq)
        session.run_root(root.agent, json.loads(root.payload), snapshot=snapshot)
    session.flush()
    if cost is not None:
        cost["replay_calls"] = calls["remote"]
    return len(session.recorded)


def counted_replays(session: GraphRecorder) -> dict:
    """Count the session's executions of agents that live in another process (each is one replay call)."""
    from provenance.recording.replay import RemoteAgent

    calls, execute = {"remote": 0}, session.execute

    def counting(agent, *args, **kwargs):
        calls["remote"] += isinstance(session.agent(agent), RemoteAgent)
        return execute(agent, *args, **kwargs)

    session.execute = counting
    return calls


def _rows(state: dict, table: str) -> Counter:
    return Counter(json.dumps(row, sort_keys=True) for row in state[table])


def diff_states(repaired: dict, baseline: dict) -> dict:
    """Counts of differing rows per table, and the rows themselves (which side has them)."""
    out: dict = {"rows": []}
    for table in ("facts", "decisions", "effects"):
        a, b = _rows(repaired, table), _rows(baseline, table)
        only_repaired, only_baseline = a - b, b - a
        out[table] = sum(only_repaired.values()) + sum(only_baseline.values())
        out["rows"] += [{"table": table, "side": "repaired", "row": json.loads(r)} for r in only_repaired.elements()]
        out["rows"] += [{"table": table, "side": "baseline", "row": json.loads(r)} for r in only_baseline.elements()]
    return out


def verification_differs(verification: dict | None) -> str:
    """Why a repair with this verification is not repaired ('' when it is: 0 / 0 / 0 against the clean
    run). No verification at all is no proof either."""
    v = verification or {}
    counts = [v.get(k) for k in ("facts", "decisions", "effects")]
    if counts == [0, 0, 0]:
        return ""
    if None in counts:
        return "needs attention: the repair was not verified against a clean run"
    return (f"needs attention: verification found differences from the clean run (facts {counts[0]}, decisions "
            f"{counts[1]}, effects {counts[2]}); the differing rows are listed on the incident, and its approved "
            f"items stay held")


def verify_incident(incident, *, excluded: set[str], wait: bool) -> bool:
    """An incident's verification, as far as it can go now: record the clean baseline unless the one
    there left out the same sources, and once the repair is applied (phase `verifying`) diff the
    workspace against it into `incident.verification`. The baseline depends only on the root actions and
    the flagged sources, never on the repair, so an idle worker records it while the repairing worker
    walks and applies, and goes on to the diff if the repair is applied by then. False when another
    worker holds the workspace's baseline and `wait` is off. `excluded`: the sources the repair leaves
    out (Incident.excluded_sources)."""
    with advisory_lock(locks.BASELINE, incident.workspace_id, wait=wait) as mine:
        if not mine:
            return False
        incident.refresh_from_db(fields=["baseline_for", "status", "phase", "verification"])
        if incident.phase == type(incident).Phase.VERIFYING:
            fault_point("verifying")  # the tests hold a verification here and record meanwhile
        excluded = sorted(excluded)
        # Where the repair caught up to: the desk may have recorded on since, which neither side covers.
        through, before = type(incident).objects.filter(pk=incident.pk).values_list(
            "plan__through", "plan__before_apply").first() or (None, None)
        if before is not None and settings.KINTSUGI_VERIFY_SCOPE == "radius":
            # In proportion to the damage (repairs.verify_radius): needs the repair applied, no baseline.
            if incident.phase == type(incident).Phase.VERIFYING and incident.verification is None:
                from repairs.verify_radius import verify_radius

                incident.verification = verify_radius(incident, excluded=set(excluded), through=through,
                                                      before=before)
                type(incident).objects.filter(pk=incident.pk).update(verification=incident.verification)
            return True
        if not (incident.baseline_for and incident.baseline_for.get("excluded") == excluded
                and incident.baseline_for.get("through") == through):
            started, cost = time.monotonic(), {}
            actions = record_baseline(workspace=incident.workspace, excluded=set(excluded), below=through, cost=cost)
            incident.baseline_for = {"excluded": excluded, "actions": actions, "through": through,
                                     "replay_calls": cost.get("replay_calls", 0),
                                     "seconds": round(time.monotonic() - started, 3),
                                     "recorded_by": f"{socket.gethostname()}:{os.getpid()}"}
            fields = {"baseline_for": incident.baseline_for}
            if incident.status == type(incident).Status.REPAIRING:
                fields["verification"] = incident.verification = None  # it was against another baseline
            type(incident).objects.filter(pk=incident.pk).update(**fields)
            fault_point("baselined")
            # The repair may have been applied while the baseline was recorded: then diff it now too.
            incident.refresh_from_db(fields=["phase", "verification"])
        if incident.phase == type(incident).Phase.VERIFYING and incident.verification is None:
            started = time.monotonic()
            incident.verification = diff_workspace(incident.workspace, below=through) | {
                "scope": "full", "actions_rerun": incident.baseline_for.get("actions"),
                "replay_calls": incident.baseline_for.get("replay_calls", 0),
                "seconds": round(time.monotonic() - started + incident.baseline_for.get("seconds", 0), 3)}
            type(incident).objects.filter(pk=incident.pk).update(verification=incident.verification)
        return True


def diff_workspace(workspace: Workspace, *, below: float | None = None) -> dict:
    return diff_states(export_state(workspace=workspace.name, below=below),
                       export_state(workspace=workspace.name, baseline=True))

