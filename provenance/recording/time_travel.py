"""What the system believed when: a fact's versions on the three clocks, and an action's reads as memory
stood when it ran beside what is true now.

The clocks (provenance.recording.selectors.version_as_of): known (when the system learned it, given explicitly
when old material is back-filled), valid (when it was true in the world, only when an agent said so),
system (when it was written). Every version also says when and by which incident it was invalidated.
An action ran at its `recorded_at` (the recorder stamps every action when it commits it). A repair
re-runs an action in place and replaces its READ edges, so "the version it saw" is resolved again the
way the recorder resolved it then — the latest version written before the action's seq that had been
written and not invalidated at the moment it ran — and the re-run's reads are shown beside it.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.recording.selectors import CLOCKS, fact_history, parse_clock, version_as_of, whole_seq
from provenance.access.trust import fact_rows, fact_trust


class UnknownAction(LookupError):
    pass


class UnknownFact(LookupError):
    pass


def ran_at(*, workspace: Workspace, action_id: int) -> datetime:
    """When an action ran (its recorded_at), for questions asked "as of this action"."""
    rows = workspace_graph(workspace.name).ro_query(queries.ACTION_RAN_AT, {"id": action_id})
    if not rows:
        raise UnknownAction(f"unknown action {action_id} in workspace {workspace.name!r}")
    at = parse_clock(rows[0].ran_at)
    if at is None:
        raise UnknownAction(f"action {action_id} in workspace {workspace.name!r} has no recorded time")
    return at


def _lineage(workspace: Workspace) -> tuple[dict[int, list[str]], dict[int, str]]:
    rows = fact_rows(workspace_graph(workspace.name))
    return {f.id: f.sources for f in rows}, fact_trust(workspace=workspace, rows=rows)


def _versions(workspace: Workspace, key: str, sources: dict, trust: dict) -> list[dict]:
    return [v | {"sources": sources.get(v["id"], []), "trust": trust.get(v["id"], "unknown")}
            for v in fact_history(workspace=workspace.name, key=key)]


def _clocks(versions: list[dict], at: datetime) -> dict[str, dict | None]:
    return {clock: version_as_of(versions, at=at, clock=clock) for clock in CLOCKS}


def fact_page(*, workspace: Workspace, key: str) -> dict:
    """Every version of `key` with its three clocks, who wrote it from which source, its trust, when and
    by which incident it was invalidated; and which version holds now on each clock."""
    sources, trust = _lineage(workspace)
    versions = _versions(workspace, key, sources, trust)
    if not versions:
        raise UnknownFact(f"no fact {key!r} in workspace {workspace.name!r}")
    return {"workspace": workspace.name, "key": key, "versions": versions,
            "now": _clocks(versions, datetime.now(timezone.utc))}


def _seen_when_run(versions: list[dict], *, seq: float, action_id: int, at: datetime) -> dict | None:
    """The version the recorder resolved for this action when it ran (FactIndex.resolve, on memory as it
    stood at `at`)."""
    seen = None
    for v in versions:
        written, invalidated = parse_clock(v["system_at"]), parse_clock(v["invalidated_at"])
        if written is None or written > at or (invalidated is not None and invalidated <= at):
            continue
        if v["seq"] < seq or v["writer"] == action_id:
            seen = v
    return seen


def action_page(*, workspace: Workspace, action_id: int) -> dict:
    """An action, when it ran, and for each fact it read: the version it saw then, the version its
    latest run reads, and what held on each clock at that moment beside now."""
    graph = workspace_graph(workspace.name)
    rows = graph.ro_query(queries.ACTION_RECORD, {"id": action_id})
    if not rows:
        raise UnknownAction(f"unknown action {action_id} in workspace {workspace.name!r}")
    a = rows[0]
    aid, seq, at = a.id, a.seq, parse_clock(a.ran_at)
    reads_now = dict(graph.ro_query(queries.ACTION_READ_VERSIONS, {"id": action_id}))
    sources, trust = _lineage(workspace)
    now = datetime.now(timezone.utc)
    facts = []
    for key in sorted(set(a.read_keys or []) | set(reads_now)):
        versions = _versions(workspace, key, sources, trust)
        by_version = {v["version"]: v for v in versions}
        facts.append({
            "key": key,
            "seen": _seen_when_run(versions, seq=seq, action_id=aid, at=at) if at else None,
            "read_now": by_version.get(reads_now.get(key)),
            "then": _clocks(versions, at) if at else {c: None for c in CLOCKS},
            "now": _clocks(versions, now),
            "versions": versions,
        })
    return {
        "workspace": workspace.name, "action": aid, "agent": a.agent, "seq": whole_seq(seq), "ticket": a.ticket,
        "status": a.status, "ran_at": a.ran_at, "incident": a.incident, "parent": a.parent,
        "decision": json.loads(a.decision) if a.decision else None,
        "decision_before_repair": json.loads(a.prev_decision) if a.prev_decision else None,
        "ingested": sorted(a.ingested or []), "facts": facts,
    }
