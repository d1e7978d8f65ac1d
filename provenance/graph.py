"""The one place that owns the FalkorDB connection and names the graphs.

Graphs: `<prefix>:<workspace>` (the provenance graph), `<prefix>:<workspace>:baseline` (the clean
re-execution used for verification) and `<prefix>:llm_cache` (model responses).

Every write leaves a stamp beside its graph (a hash `~stamp:<graph>`): `epoch`, a fresh random token
after any write that may change existing nodes or edges; `hwm`, the highest action id of the
recorder's finished append-only flushes; `pending`, 1 while such a flush is being written.
provenance.mirror keeps an in-process copy of the graph's topology and trusts it exactly as long as
the stamp says nothing but appends happened since it was read.
"""
from __future__ import annotations

import threading
import uuid
from typing import Any

import redis
from django.conf import settings
from falkordb import FalkorDB

from provenance import queries

_local = threading.local()
_schema_ready: set[str] = set()


class GraphUnavailable(RuntimeError):
    """FalkorDB could not be reached; the message names the URL."""


def falkordb_url() -> str:
    if settings.FALKORDB_URL:
        return settings.FALKORDB_URL
    from kintsugi_site import embedded

    return embedded.ensure_falkordb()


def _db() -> FalkorDB:
    url = falkordb_url()
    db = getattr(_local, "db", None)
    if db is None or getattr(_local, "url", None) != url:
        try:
            db = FalkorDB.from_url(url, socket_timeout=120, socket_connect_timeout=3)
        except (redis.exceptions.ConnectionError, OSError) as exc:
            raise GraphUnavailable(f"FalkorDB at {url} is unreachable: {exc}") from exc
        _local.db, _local.url = db, url
    return db


def graph_name(workspace: str, *, baseline: bool = False) -> str:
    name = f"{settings.KINTSUGI_GRAPH_PREFIX}:{workspace}"
    return f"{name}:baseline" if baseline else name


def cache_graph_name() -> str:
    return f"{settings.KINTSUGI_GRAPH_PREFIX}:llm_cache"


class Graph:
    """A thin wrapper that turns connection failures into GraphUnavailable and sets up indexes once."""

    def __init__(self, name: str):
        self.name = name
        self._graph = _db().select_graph(name)

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
            return _db().connection.execute_command(*args)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            _local.db = None
            raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc

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
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            _local.db = None
            raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc
        row = getattr(cypher, "row", None)  # provenance.rows: the query's named row type
        return [row._make(r) for r in result] if row is not None else result

    def _ensure_schema(self) -> None:
        # Indexes before any parallel writer: concurrent MERGE on a label without an index duplicated
        # nodes in about half of the runs (FALKORDB-NOTES.md).
        if self.name in _schema_ready:
            return
        for cypher in queries.SCHEMA:
            try:
                self._raw(cypher, None)
            except redis.exceptions.ResponseError as exc:
                if "already" not in str(exc).lower():
                    raise
        _schema_ready.add(self.name)

    def delete(self) -> None:
        try:
            self._graph.delete()
        except redis.exceptions.ResponseError:
            pass  # the graph did not exist
        except (redis.exceptions.ConnectionError, OSError) as exc:
            raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc
        _schema_ready.discard(self.name)
        self.mark_changed()

    def exists(self) -> bool:
        try:
            return self.name in _db().list_graphs()
        except (redis.exceptions.ConnectionError, OSError) as exc:
            raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc


def workspace_graph(workspace: str, *, baseline: bool = False) -> Graph:
    return Graph(graph_name(workspace, baseline=baseline))


def ping() -> None:
    try:
        _db().connection.ping()
    except (redis.exceptions.ConnectionError, OSError) as exc:
        _local.db = None
        raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc
