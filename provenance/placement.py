"""Which FalkorDB server holds a workspace, and moving a workspace to another one.

Placement rule: a new workspace goes to the configured server (KINTSUGI_FALKORDB_URLS) that holds the
fewest workspaces, ties to the first listed. Fewest workspaces rather than round-robin because it
stays balanced when workspaces are deleted or moved (a round-robin counter would keep its old turn)
and needs nothing but Postgres, so creating a workspace works while a graph server is down; rather
than the fewest actions because a desk's size is unknown when it is created. A server that is full
for another reason is emptied by moving workspaces off it (`manage.py move_workspace`).

A move copies the workspace's graph, baseline and model cache with DUMP/RESTORE (FalkorDB serialises a
graph, indexes included, as one key; both servers must run the same FalkorDB version), checks the
copy's node and edge counts, switches the placement in the transaction that records the move in the
workspace's audit chain, and deletes the old copies only after that commits. It holds the workspace's
writer lock (provenance.recording.services.workspace_lock) while copying, so no recording or repair writes the
old copy meanwhile, and refuses while a repair of the workspace is open, running or blocked. A crash
before the switch leaves the placement as it was (re-running overwrites the partial copy); a crash
after it leaves old copies that re-running the same move deletes.
"""
from __future__ import annotations

from django.conf import settings
from django.db.models import Count


def new_workspace_server() -> str:
    """The placement of a workspace being created: '' (the default server) when no servers are
    listed, else the listed server holding the fewest workspaces."""
    from provenance.graph.graph import default_server_key, placement_servers
    from provenance.models import Workspace

    if not settings.KINTSUGI_FALKORDB_URLS:
        return ""
    servers = list(placement_servers())
    held = dict.fromkeys(servers, 0)
    default = default_server_key()
    for key, count in (Workspace.objects.values("falkordb_server").order_by().annotate(n=Count("pk"))
                       .values_list("falkordb_server", "n")):
        key = key or default
        if key in held:
            held[key] += count
    return min(servers, key=lambda k: (held[k], servers.index(k)))


def servers_in_use() -> list[dict]:
    """Each configured server (and any other a workspace is still placed on) with how many
    workspaces and recorded actions it holds."""
    from django.db.models import Sum

    from provenance.graph.graph import default_server_key, placement_servers
    from provenance.models import Workspace

    default = default_server_key()
    rows = {key: {"server": key, "workspaces": 0, "actions": 0} for key in placement_servers()}
    for key, n, actions in (Workspace.objects.values("falkordb_server").order_by()
                            .annotate(n=Count("pk"), actions=Sum("action_count"))
                            .values_list("falkordb_server", "n", "actions")):
        row = rows.setdefault(key or default, {"server": key or default, "workspaces": 0, "actions": 0})
        row["workspaces"] += n
        row["actions"] += actions or 0
    return list(rows.values())
