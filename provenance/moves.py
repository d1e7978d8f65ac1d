"""Moving a workspace (graph, baseline, model cache) to another FalkorDB server.

The steps, each safe to repeat (see provenance.placement for why a crash at any point is recovered by
running the same move again):
1. refuse unless a superuser gives a reason, the target is configured, and no repair of the workspace
   is open, running or blocked;
2. in one transaction, holding the workspace row and its writer lock: copy each graph, check the
   copy's counts, switch `Workspace.falkordb_server` and record the move in the workspace's chain;
3. after that commits, delete the old copies.
A move to where the workspace already is deletes copies an interrupted move left on other servers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from core.audit import trail
from core.vocabulary import AuditAction
from provenance import validation
from provenance.graph.graph import (
    copy_graph, default_server_key, drop_graph, placement_servers, server_url, workspace_graph_names,
)
from provenance.models import Workspace
from provenance.progress import ProgressFn, noop
from provenance.recording.services import workspace_lock
from provenance.signals import workspace_moving

MOVED, LEFTOVERS_DELETED = AuditAction.WORKSPACE_MOVED, AuditAction.WORKSPACE_LEFTOVERS_DELETED


class MoveRefused(ValueError):
    """The move was refused before anything was copied or switched."""


@dataclass
class MoveResult:
    workspace: str
    from_server: str
    to_server: str
    moved: bool
    copied: dict[str, dict | None] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)


def _refuse_while_repairing(workspace: Workspace) -> None:
    # The apps above refuse through the signal (repairs.receivers: a repair under way).
    workspace_moving.send(sender=Workspace, workspace=workspace)


def _leftovers(workspace: Workspace, *, keep: str) -> list[tuple[str, str]]:
    """(server key, graph name) of this workspace's copies on servers other than `keep`."""
    from provenance.graph.graph import Graph

    found = []
    keys = dict(placement_servers())
    keys.setdefault(default_server_key(), server_url(""))
    for key, url in keys.items():
        if key == keep:
            continue
        for name in workspace_graph_names(workspace.name):
            graph = Graph(name, url)
            if graph.exists() or graph.stamp_key_exists():
                found.append((key, name))
    return found


def move_workspace(*, workspace: Workspace, to_server: str, actor, reason: str, via: str,
                   progress: ProgressFn = noop) -> MoveResult:
    """Move `workspace`'s graphs to server `to_server` (a `host:port` placement key)."""
    reason = validation.reason(reason)
    if actor is None or not actor.is_active or not actor.is_superuser:
        raise MoveRefused("only a superuser moves a workspace between FalkorDB servers")
    servers = placement_servers()
    if to_server not in servers:
        raise MoveRefused(f"FalkorDB server {to_server!r} is not configured; KINTSUGI_FALKORDB_URLS lists "
                          f"{', '.join(servers)}")
    workspace = Workspace.objects.get(pk=workspace.pk)
    current = workspace.falkordb_server or default_server_key()
    if current == to_server:
        return _finish_interrupted(workspace, to_server=to_server, actor=actor, reason=reason, via=via)
    _refuse_while_repairing(workspace)
    source_url, target_url = server_url(workspace.falkordb_server), servers[to_server]
    names = workspace_graph_names(workspace.name)
    result = MoveResult(workspace.name, current, to_server, moved=True)
    with transaction.atomic():
        # The graph's lock before the chain and the row: a repair holding the graph audits and updates
        # the row, so the other order could deadlock with it (provenance.recording.services.workspace_lock).
        workspace_lock(workspace, wait_seconds=5)
        trail.lock_chain(workspace)  # chain first, like every audited transaction
        ws = Workspace.objects.select_for_update().get(pk=workspace.pk)
        if ws.falkordb_server != workspace.falkordb_server:
            raise MoveRefused(f"workspace {ws.name!r} was moved meanwhile (now on {ws.falkordb_server or current})")
        _refuse_while_repairing(ws)  # again, now that no repair can start writing
        for i, name in enumerate(names, start=1):
            result.copied[name] = copy_graph(name, source_url=source_url, target_url=target_url)
            progress(i, len(names) + 1)
        ws.falkordb_server = to_server
        ws.save(update_fields=["falkordb_server"])
        trail.record(action=MOVED, subject_type="workspace", subject_id=ws.pk, via=via, actor=actor, reason=reason,
                     workspace=ws, data={"from": current, "to": to_server, "graphs": result.copied})
    # Only now: until the switch committed, the old copies were the workspace's data.
    for name in names:
        if drop_graph(name, url=source_url):
            result.deleted.append(f"{current}/{name}")
    progress(len(names) + 1, len(names) + 1)
    return result


def _finish_interrupted(workspace: Workspace, *, to_server: str, actor, reason: str, via: str) -> MoveResult:
    """The workspace is on `to_server` already: delete what an interrupted move left elsewhere."""
    result = MoveResult(workspace.name, to_server, to_server, moved=False)
    leftovers = _leftovers(workspace, keep=to_server)
    if not leftovers:
        return result
    servers = dict(placement_servers())
    for key, name in leftovers:
        drop_graph(name, url=servers.get(key) or server_url(key))
        result.deleted.append(f"{key}/{name}")
    with transaction.atomic():
        trail.lock_chain(workspace)
        trail.record(action=LEFTOVERS_DELETED, subject_type="workspace", subject_id=workspace.pk, via=via,
                     actor=actor, reason=reason, workspace=workspace, data={"deleted": result.deleted})
    return result
