"""The one place that owns the FalkorDB connection and names the graphs.

Graphs: `<prefix>:<workspace>` (the provenance graph), `<prefix>:<workspace>:baseline` (the clean
re-execution used for verification) and `<prefix>:llm_cache` (model responses).
"""
from __future__ import annotations

import threading
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

    def query(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        self._ensure_schema()
        return self._raw(cypher, params)

    def ro_query(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        self._ensure_schema()
        return self._raw(cypher, params, read_only=True)

    def _raw(self, cypher: str, params: dict | None, read_only: bool = False) -> list[list[Any]]:
        try:
            run = self._graph.ro_query if read_only else self._graph.query
            return run(cypher, params or {}).result_set
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            _local.db = None
            raise GraphUnavailable(f"FalkorDB at {falkordb_url()} is unreachable: {exc}") from exc

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
