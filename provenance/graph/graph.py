"""The one place that owns the FalkorDB connections and names the graphs.

Graphs: `<prefix>:<workspace>` (the provenance graph), `<prefix>:<workspace>:baseline` (the clean
re-execution used for verification) and `<prefix>:<workspace>:llm_cache` (its model responses).

Servers: FALKORDB_URL (or the embedded server) is the default; KINTSUGI_FALKORDB_URLS lists the servers
workspaces are placed on. A workspace's three graphs live on the server its row names
(`Workspace.falkordb_server`, a `host:port` key so no password is ever stored or shown; empty: the
default server), chosen when the workspace is created (provenance.placement). The placement is read
from Postgres on every `workspace_graph()` call, never cached in the process, so a move
(`manage.py move_workspace`) is seen by every process at its next question.

Every write leaves a stamp beside its graph (a hash `~stamp:<graph>`): `epoch`, a fresh random token
after any write that may change existing nodes or edges; `hwm`, the highest action id of the
recorder's append-only flushes, sent right behind each (provenance.graph.pipelined); `pending`, 1 while
an append written in several queries is being written (the recorder's flush is one query).
provenance.graph.mirror keeps an in-process copy of the graph's topology and trusts it exactly as long as
the stamp says nothing but appends happened since it was read.
"""
from __future__ import annotations

import os
import threading
import uuid
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from falkordb import FalkorDB

from core.errors import DomainError
from provenance.graph import queries, top_ids

# One client per server URL for the whole process. redis-py's pool is thread-safe and lends each thread a
# connection of its own; a client per thread would be rebuilt on every request under ASGI, where each
# request runs in a thread of its own (a new connection, and the client's INFO and version look-ups).
_dbs: dict[str, FalkorDB] = {}
_dbs_lock = threading.Lock()
os.register_at_fork(after_in_child=_dbs.clear)  # a forked worker connects on its own
_schema_ready: set[str] = set()


class GraphUnavailable(DomainError, RuntimeError):
    """FalkorDB could not be reached; the message names the URL (for operators: callers are told less)."""

    code, status = "graph_unavailable", 503

    def public_message(self) -> str:
        return "the provenance graph store is unavailable; try again shortly"


# What "the server is away" looks like to a client: refused, reset, or silent past the socket timeout (a
# frozen server accepts connections and never answers). Each is an outage to wait out, never a bug.
_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def falkordb_url() -> str:
    """The default server's URL (FALKORDB_URL, else the embedded server)."""
    if settings.FALKORDB_URL:
        return settings.FALKORDB_URL
    from core import embedded

    try:
        return embedded.ensure_falkordb()
    except OSError as exc:  # e.g. its port held by a server that does not answer
        raise GraphUnavailable(f"the embedded FalkorDB is unavailable: {exc}") from exc


def default_server_key() -> str:
    """The placement key of the default server, without starting the embedded one."""
    if settings.FALKORDB_URL:
        return server_key(settings.FALKORDB_URL)
    from core import embedded

    return f"127.0.0.1:{embedded.FALKORDB_PORT}"


def server_key(url: str) -> str:
    """`host:port` of a server URL: how placements name it (the URL may carry a password)."""
    parts = urlsplit(url)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"


def server_label(url: str) -> str:
    """The URL without its credentials, for messages and logs."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def placement_servers() -> dict[str, str]:
    """The servers workspaces may be placed on, key → URL, in the configured order (the default
    server alone when KINTSUGI_FALKORDB_URLS is empty)."""
    urls = list(getattr(settings, "KINTSUGI_FALKORDB_URLS", None) or []) or [falkordb_url()]
    return {server_key(url): url for url in urls}


class UnknownServer(LookupError):
    """A placement names a server that the configuration does not list."""


def server_url(key: str) -> str:
    """The URL of placement `key` (empty: the default server)."""
    if not key:
        return falkordb_url()
    servers = placement_servers()
    if key in servers:
        return servers[key]
    if default_server_key() == key:
        return falkordb_url()
    raise UnknownServer(f"FalkorDB server {key!r} is not configured (KINTSUGI_FALKORDB_URLS lists "
                        f"{', '.join(servers) or 'none'})")


def workspace_server(workspace: str) -> str:
    """The placement key of workspace `workspace` ('' for the default server, or no such row)."""
    from provenance.models import Workspace

    if not getattr(settings, "KINTSUGI_FALKORDB_URLS", None):
        return ""  # one server: every workspace is on it, and no page pays a placement query per graph
    if "\x00" in workspace:
        return ""  # Postgres text cannot hold NUL, so no workspace has this name (and the query would fail)
    return Workspace.objects.filter(name=workspace).values_list("falkordb_server", flat=True).first() or ""


def _db(url: str | None = None) -> FalkorDB:
    url = url or falkordb_url()
    db = _dbs.get(url)
    if db is not None:
        return db
    with _dbs_lock:
        db = _dbs.get(url)
        if db is None:
            try:
                db = FalkorDB.from_url(url, socket_timeout=settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS,
                                     socket_connect_timeout=min(3.0, settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS))
            except _DOWN as exc:
                raise GraphUnavailable(f"FalkorDB at {server_label(url)} is unreachable: {exc}") from exc
            _dbs[url] = db
    return db


def _forget(url: str) -> None:
    # Its pooled connections may be to a server that went away: the next caller gets a new client.
    with _dbs_lock:
        _dbs.pop(url, None)


def graph_name(workspace: str, *, baseline: bool = False) -> str:
    name = f"{settings.KINTSUGI_GRAPH_PREFIX}:{workspace}"
    return f"{name}:baseline" if baseline else name


def cache_graph_name(workspace: str | None = None) -> str:
    """The model response cache of `workspace`; without one, the shared cache on the default server
    (model calls made outside any workspace)."""
    if workspace is None:
        return f"{settings.KINTSUGI_GRAPH_PREFIX}:llm_cache"
    return f"{settings.KINTSUGI_GRAPH_PREFIX}:{workspace}:llm_cache"


def workspace_graph_names(workspace: str) -> list[str]:
    """Every graph a workspace owns, on whichever server it is placed."""
    return [graph_name(workspace), graph_name(workspace, baseline=True), cache_graph_name(workspace)]


class Graph:
    """A thin wrapper that turns connection failures into GraphUnavailable and sets up indexes once."""

    def __init__(self, name: str, url: str | None = None):
        self.name = name
        self.url = url or falkordb_url()
        self._graph = _db(self.url).select_graph(name)

    def query(self, cypher: str, params: dict[str, Any] | None = None, *, append: bool = False) -> list[list[Any]]:
        """A write. With append=True the caller promises it only adds actions above the stamp's `hwm`
        (and their edges and effects) and calls mark_appended() once all of them are written;
        anything else invalidates every mirror of this graph, even when the write fails half-way."""
        self._ensure_schema()
        try:
            return self._raw(cypher, params)
        finally:
            if not append:
                self.mark_changed()

    # --- stamps (see the module docstring) ---
    @property
    def stamp_key(self) -> str:
        return f"~stamp:{self.name}"

    def _stamp_call(self, *args: Any) -> Any:
        try:
            return _db(self.url).connection.execute_command(*args)
        except _DOWN as exc:
            _forget(self.url)
            raise GraphUnavailable(f"FalkorDB at {server_label(self.url)} is unreachable: {exc}") from exc

    def stamp_key_exists(self) -> bool:
        return bool(self._stamp_call("EXISTS", self.stamp_key))

    def mark_changed(self) -> None:
        self._stamp_call("HSET", self.stamp_key, "epoch", uuid.uuid4().hex, "pending", 0)

    def mark_appending(self) -> None:
        self._stamp_call("HSET", self.stamp_key, "pending", 1)

    def mark_appended(self, through_action: int) -> None:
        self._stamp_call("HSET", self.stamp_key, "hwm", through_action, "pending", 0)

    def stamp(self) -> tuple[str, int, bool]:
        """(epoch, hwm, pending) as they stand now; a graph never stamped gets its first epoch here."""
        epoch, hwm, pending = self._stamp_call("HMGET", self.stamp_key, "epoch", "hwm", "pending")
        if epoch is None:
            self._stamp_call("HSETNX", self.stamp_key, "epoch", uuid.uuid4().hex)
            epoch, hwm, pending = self._stamp_call("HMGET", self.stamp_key, "epoch", "hwm", "pending")
        return (epoch.decode() if isinstance(epoch, bytes) else epoch), int(hwm or 0), pending not in (None, b"0", "0")

    def ro_query(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        self._ensure_schema()
        return self._raw(cypher, params, read_only=True)

    def _raw(self, cypher: str, params: dict | None, read_only: bool = False) -> list[list[Any]]:
        try:
            run = self._graph.ro_query if read_only else self._graph.query
            result = run(cypher, params or {}).result_set
        except _DOWN as exc:
            _forget(self.url)
            raise GraphUnavailable(f"FalkorDB at {server_label(self.url)} is unreachable: {exc}") from exc
        row = getattr(cypher, "row", None)  # provenance.graph.rows: the query's named row type
        return [row._make(r) for r in result] if row is not None else result

    def _ensure_schema(self) -> None:
        # Indexes before any parallel writer: concurrent MERGE on a label without an index duplicated
        # nodes in about half of the runs (FALKORDB-NOTES.md).
        if (self.url, self.name) in _schema_ready:
            return
        for cypher in queries.SCHEMA:
            try:
                self._raw(cypher, None)
            except redis.exceptions.ResponseError as exc:
                if "already" not in str(exc).lower():
                    raise
        _schema_ready.add((self.url, self.name))

    def delete(self) -> None:
        try:
            self._graph.delete()
        except redis.exceptions.ResponseError:
            pass  # the graph did not exist
        except _DOWN as exc:
            raise GraphUnavailable(f"FalkorDB at {server_label(self.url)} is unreachable: {exc}") from exc
        _schema_ready.discard((self.url, self.name))
        top_ids.forget(self)
        self.mark_changed()

    def exists(self) -> bool:
        try:
            return self.name in _db(self.url).list_graphs()
        except _DOWN as exc:
            raise GraphUnavailable(f"FalkorDB at {server_label(self.url)} is unreachable: {exc}") from exc


def workspace_graph(workspace: str, *, baseline: bool = False, server: str | None = None) -> Graph:
    """A workspace's graph (or its baseline) on the server it is placed on; `server` (a placement
    key) overrides the placement, for the move that copies it elsewhere."""
    key = workspace_server(workspace) if server is None else server
    return Graph(graph_name(workspace, baseline=baseline), server_url(key))


def workspace_cache_graph(workspace: str | None, *, server: str | None = None) -> Graph:
    """The model response cache of `workspace` on its server (None: the shared one, default server)."""
    if workspace is None:
        return Graph(cache_graph_name())
    key = workspace_server(workspace) if server is None else server
    return Graph(cache_graph_name(workspace), server_url(key))


def ping(*, workspace: str | None = None, server: str | None = None) -> None:
    """Fail with GraphUnavailable unless the server of `workspace`, or the server of placement key
    `server`, answers (neither: the default server)."""
    if server is not None:
        url = server_url(server)
    else:
        url = server_url(workspace_server(workspace)) if workspace else falkordb_url()
    try:
        _db(url).connection.ping()
    except _DOWN as exc:
        _forget(url)
        raise GraphUnavailable(f"FalkorDB at {server_label(url)} is unreachable: {exc}") from exc


def _connection(url: str):
    return _db(url).connection


def copy_graph(name: str, *, source_url: str, target_url: str) -> dict | None:
    """Copy graph `name` and its stamp from one server to another with DUMP/RESTORE (the graph,
    indexes included, travels as one serialised key; both servers must run the same FalkorDB).
    Returns the copy's node and edge counts after checking them against the original's, or None
    when the source has no such graph (then the target has none either)."""
    try:
        source, target = _connection(source_url), _connection(target_url)
        for key in (name, f"~stamp:{name}"):
            blob = source.dump(key)
            if blob is None:
                target.delete(key)
            else:
                target.restore(key, 0, blob, replace=True)
    except _DOWN as exc:
        _forget(source_url)
        _forget(target_url)
        raise GraphUnavailable(f"copying {name} from {server_label(source_url)} to {server_label(target_url)} "
                               f"failed: {exc}") from exc
    if not Graph(name, source_url).exists():
        return None
    counts = {}
    for which, url in (("source", source_url), ("copy", target_url)):
        g = Graph(name, url)
        counts[which] = (g.ro_query(queries.GRAPH_NODE_COUNT)[0][0], g.ro_query(queries.GRAPH_EDGE_COUNT)[0][0])
    if counts["source"] != counts["copy"]:
        raise GraphUnavailable(f"the copy of {name} on {server_label(target_url)} holds {counts['copy']} "
                               f"(nodes, edges), the original {counts['source']}")
    # A fresh epoch on the copy: a process holding a mirror of an earlier copy there must not trust it.
    Graph(name, target_url).mark_changed()
    return {"nodes": counts["copy"][0], "edges": counts["copy"][1]}


def drop_graph(name: str, *, url: str) -> bool:
    """Delete graph `name` and its stamp on one server (a mirror of it anywhere then reads a new
    epoch and is dropped). True when there was something to delete."""
    graph = Graph(name, url)
    found = graph.exists()
    if found:
        graph.delete()
    try:
        found = bool(_connection(url).delete(graph.stamp_key)) or found
    except _DOWN as exc:
        _forget(url)
        raise GraphUnavailable(f"FalkorDB at {server_label(url)} is unreachable: {exc}") from exc
    return found


def id_set(ids: list[int]) -> dict:
    """The parameters of an *_OF_SET query for these ids: $slot[id - $lo] is the position of the id's
    last occurrence in `ids` plus one, 0 for an id not in the set."""
    lo, hi = min(ids), max(ids)
    slot = [0] * (hi - lo + 1)
    for n, i in enumerate(ids, 1):
        slot[i - lo] = n
    return {"lo": lo, "hi": hi, "slot": slot}
