"""Verification: re-execute the workspace's root actions without the flagged sources into the baseline
graph, then diff the repaired workspace against it (active facts, ticket decisions, live effects)."""
from __future__ import annotations

import json
import os
import socket
from collections import Counter

from provenance import queries
from provenance.graph import workspace_graph
from provenance.models import Workspace
from provenance.recorder import RecordingSession
from provenance.selectors import export_state, ingesters


def record_baseline(*, workspace: Workspace, excluded: set[str]) -> int:
    """Record the clean baseline run; returns its action count. Model answers come from the cache."""
    graph = workspace_graph(workspace.name)
    baseline = workspace_graph(workspace.name, baseline=True)
    baseline.delete()
    tainted = {a for source in excluded for a in ingesters(graph, source)}
    session = RecordingSession(graph=baseline, workspace=workspace.name,
                               sources=dict(workspace.sources.values_list("source_id", "content")),
                               effects="sandbox", excluded_sources=excluded, load=False)
    for aid, agent, _, payload in graph.ro_query(queries.ROOT_ACTIONS):
        if aid not in tainted:
            session.run_root(agent, json.loads(payload))
    session.flush()
    return len(session.recorded)


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


BASELINE_LOCK = 7174  # advisory lock namespace: (BASELINE_LOCK, workspace id) while a baseline is recorded


def record_incident_baseline(incident, *, wait: bool) -> bool:
    """Record the baseline an incident's verification needs, unless it is already there. The baseline
    depends only on the root actions and the flagged sources, never on the repair, so an idle worker
    records it while the repairing worker walks and applies. False when another worker is recording
    it and `wait` is off."""
    from repairs.runtime import advisory_lock, excluded_sources

    with advisory_lock(BASELINE_LOCK, incident.workspace_id, wait=wait) as mine:
        if not mine:
            return False
        incident.refresh_from_db(fields=["baseline_for", "status"])
        excluded = sorted(excluded_sources(incident))
        if incident.baseline_for and incident.baseline_for.get("excluded") == excluded:
            return True
        actions = record_baseline(workspace=incident.workspace, excluded=set(excluded))
        recorded_by = f"{socket.gethostname()}:{os.getpid()}"
        type(incident).objects.filter(pk=incident.pk).update(
            baseline_for={"excluded": excluded, "actions": actions, "recorded_by": recorded_by})
        return True


def verify_workspace(*, workspace: Workspace, excluded: set[str], incident=None) -> dict:
    if incident is None:
        record_baseline(workspace=workspace, excluded=excluded)
    else:
        record_incident_baseline(incident, wait=True)
    return diff_states(export_state(workspace=workspace.name), export_state(workspace=workspace.name, baseline=True))
