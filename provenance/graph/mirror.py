"""An in-process copy of a workspace graph's topology, for blast radius questions in milliseconds.

A radius is a walk over FEEDS|HANDED_OFF from the actions that ingested a source. FalkorDB walks it fast,
but handing 30k-300k ids back through the client costs more than the walk (bench/README.md); a Python
BFS over adjacency lists held in the process answers the same question several times faster.

The copy is trusted only while the graph's stamp (provenance.graph.graph) says nothing but appends happened
since it was read: the same epoch token means no existing node or edge changed, and a higher `hwm`
means the recorder appended actions, which are fetched by id range and merged in. Any other write gives
a new epoch and the next question rebuilds the copy from scratch. The stamp is read before the graph,
so a copy can be newer than its stamp but never older. A read that overlapped a flush may hold that
flush's actions without all their edges: the next merge fetches them again (`cursor` stays at the
stamp's hwm), and a fetch of an action replaces what the copy held for it.
"""
from __future__ import annotations

import gc
import threading
from collections import OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from django.conf import settings

from provenance.graph import queries
from provenance.graph.graph import Graph
from provenance.vocabulary import DEAD


@dataclass
class Topology:
    epoch: str
    hwm: int
    # Indexed by action id (recorded ids are dense from 1): successors, seq, agent, ticket, live.
    succ: list = field(default_factory=lambda: [None])
    seq: list = field(default_factory=lambda: [None])
    agent: list = field(default_factory=lambda: [None])
    ticket: list = field(default_factory=lambda: [None])
    live: bytearray = field(default_factory=lambda: bytearray(1))
    effects: dict[int, list[tuple[str, int, bool]]] = field(default_factory=dict)  # action → (kind, cents, live)
    ingesters: dict[str, list[int]] = field(default_factory=dict)
    max_id: int = 0
    cursor: int = -1  # every action above this id is fetched again by the next merge

    # --- reading the graph ---
    def _grow(self, top: int) -> None:
        extra = top + 1 - len(self.seq)
        if extra > 0:
            for column in (self.succ, self.seq, self.agent, self.ticket):
                column.extend([None] * extra)
            self.live.extend(bytes(extra))

    def load(self, graph: Graph, after: int) -> None:
        """Merge in every action with id > `after`, the edges into them, their effects and ingests."""
        packed, tickets = graph.ro_query(queries.MIRROR_ACTIONS, {"after": after, "dead": list(DEAD)})[0]
        rows = packed.split(",") if packed else []
        if len(rows) != len(tickets):
            raise RuntimeError("mirror: action and ticket columns are not aligned")
        parsed = []
        for item, ticket in zip(rows, tickets):
            aid, seq, agent, live, has_ticket = item.split(":")
            parsed.append((int(aid), float(seq), agent, ticket if has_ticket == "1" else None, live == "1"))
        if parsed:
            self._grow(max(p[0] for p in parsed))
        seen_before = self.max_id
        for aid, seq, agent, ticket, live in parsed:
            self.seq[aid], self.agent[aid], self.ticket[aid], self.live[aid] = seq, agent, ticket, live
            self.max_id = max(self.max_id, aid)
            self.effects.pop(aid, None)
        (edges,) = graph.ro_query(queries.MIRROR_EDGES, {"after": after})[0]
        succ = self.succ
        for pair in edges.split(",") if edges else []:
            a, b = pair.split(":")
            a, b = int(a), int(b)
            if succ[a] is None:
                succ[a] = [b]
            elif b > seen_before or b not in succ[a]:  # an edge into a re-fetched action may be known
                succ[a].append(b)
        (effects,) = graph.ro_query(queries.MIRROR_EFFECTS, {"after": after})[0]
        for item in effects.split(",") if effects else []:
            aid, kind, amount, live = item.split(":")
            self.effects.setdefault(int(aid), []).append((kind, int(amount), live == "1"))
        for aid, source in graph.ro_query(queries.MIRROR_INGESTS, {"after": after}):
            known = self.ingesters.setdefault(source, [])
            if aid not in known:
                known.append(aid)

    # --- answering ---
    def reach(self, source: str) -> list[int]:
        """Every action reachable from the actions that ingested `source` (dead ones included: the walk
        goes through them, as algo.BFS does), each visited once."""
        start = self.ingesters.get(source, [])
        seen = bytearray(len(self.seq))
        succ = self.succ
        order = []
        queue = deque()
        for a in start:
            if not seen[a]:
                seen[a] = 1
                queue.append(a)
        while queue:
            a = queue.popleft()
            order.append(a)
            nxt = succ[a]
            if nxt:
                for b in nxt:
                    if not seen[b]:
                        seen[b] = 1
                        queue.append(b)
        return order

    def live_in_seq_order(self, ids: list[int]) -> list[int]:
        """The live ones of `ids` by (seq, id): two C-level sorts (by id, then stably by seq) instead of a
        Python key building a tuple per action, three times faster at 30k actions."""
        live = self.live
        out = [i for i in ids if live[i]]
        out.sort()
        out.sort(key=self.seq.__getitem__)
        return out


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a radius answer or a topology read is turned into Python
    objects. Those objects hold no cycles, but allocating tens of thousands of them makes CPython run a
    full collection, which walks every object of the process (100 ms in a process holding a 100k-action
    graph, seconds at a million) inside the question it interrupts: the spread of a first question's
    time came from there. Nested and cross-thread pauses count; collection resumes with the last one,
    and a process that had turned collection off keeps it off."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


_lock = threading.Lock()
_cache: OrderedDict[tuple[str, str], Topology] = OrderedDict()
_graph_locks: dict[tuple[str, str], threading.Lock] = {}


@contextmanager
def reading(graph: Graph) -> Iterator[Topology]:
    """The graph's topology as of now (the cached copy, merged with appended actions, or rebuilt), held
    for the caller: merges of appended actions wait until the `with` block ends."""
    key = (graph.url, graph.name)
    with _lock:
        graph_lock = _graph_locks.setdefault(key, threading.Lock())
    with graph_lock:
        yield _current(graph, key)


_building: set[tuple[str, str]] = set()


@contextmanager
def reading_if_ready(graph: Graph) -> Iterator[Topology | None]:
    """The cached topology (merged with appended actions) when this process has one of the graph as it
    is; otherwise None at once, and the copy is read in a background thread for the next question. A
    process's first question is then answered by one query in FalkorDB instead of waiting for the whole
    topology (seconds at a million actions); the caller asks FalkorDB inside the `with` block, and the
    background read starts when the block ends. With KINTSUGI_MIRROR_BACKGROUND off, the copy is read now."""
    if not settings.KINTSUGI_MIRROR_BACKGROUND:
        with reading(graph) as topo:
            yield topo
        return
    if _holds_current(graph):
        with reading(graph) as topo:
            yield topo
        return
    try:
        yield None
    finally:
        # Only once the caller has its answer: the read would slow the question it is meant to spare.
        build_in_background(graph.name, graph.url)


@contextmanager
def reading_if_current(graph: Graph) -> Iterator[Topology | None]:
    """The cached topology when this process holds one of the graph at its current epoch (merged with
    appended actions), else None, and nothing is read for next time: for a caller about to rewrite the
    graph (a repair walk, whose apply gives it a new epoch), a copy read now would be thrown away
    unused, and reading one costs more than asking FalkorDB the question once."""
    if _holds_current(graph):
        with reading(graph) as topo:
            yield topo
        return
    yield None


def _holds_current(graph: Graph) -> bool:
    """Whether this process holds the graph's topology at its current epoch."""
    with _lock:
        cached = _cache.get((graph.url, graph.name))
    # No copy at all: no need to read the stamp before answering from FalkorDB.
    return cached is not None and cached.epoch == graph.stamp()[0]


def build_in_background(name: str, url: str | None = None) -> threading.Thread | None:
    """Read graph `name`'s topology (on server `url`, default: the default server) into the cache in a
    daemon thread (one per graph at a time)."""
    graph = Graph(name, url)
    key = (graph.url, name)
    with _lock:
        if key in _building:
            return None
        _building.add(key)

    def build() -> None:
        try:
            with gc_paused(), reading(graph):
                pass
        except Exception:  # noqa: BLE001 - the next question answers from FalkorDB and tries again
            pass
        finally:
            with _lock:
                _building.discard(key)

    thread = threading.Thread(target=build, name=f"mirror:{name}", daemon=True)
    thread.start()
    return thread


def _current(graph: Graph, key: tuple[str, str]) -> Topology:
    epoch, hwm, pending = graph.stamp()
    with _lock:
        cached = _cache.get(key)
    try:
        if cached is not None and cached.epoch == epoch:
            if hwm != cached.hwm:
                cached.load(graph, cached.cursor)
                cached.cursor, cached.hwm = _cursor(graph, cached, hwm, pending)
            current = cached
        else:
            current = Topology(epoch=epoch, hwm=hwm)
            current.load(graph, -1)
            current.cursor, current.hwm = _cursor(graph, current, hwm, pending)
    except BaseException:
        with _lock:  # a merge that stopped half-way leaves a copy nobody may trust
            _cache.pop(key, None)
        raise
    with _lock:
        _cache[key] = current
        _cache.move_to_end(key)
        while len(_cache) > settings.KINTSUGI_MIRROR_GRAPHS:
            _cache.popitem(last=False)
    return current


def _cursor(graph: Graph, topo: Topology, hwm: int, pending: bool) -> tuple[int, int]:
    """Where the next merge starts, and the hwm the copy holds: after everything read, unless a flush may
    have been half-way through the read (one was pending before it, or finished during it): then after
    the last finished flush, so its actions are fetched again.

    A stamp whose hwm is above every action read claims actions the graph does not hold: a flush whose
    query failed after its stamp was sent with it (provenance.graph.pipelined), or a recording's nodes
    removed after it failed. It is trusted no further than what was read, and not kept: the next
    question merges again, so a later write of those very ids (the next writer numbers from the graph's
    highest) is fetched even if its stamp names the same hwm."""
    _, hwm_after, pending_after = graph.stamp()
    held = hwm if hwm <= topo.max_id else -1
    if pending or pending_after or hwm_after != hwm:
        return min(hwm, topo.max_id), held
    return topo.max_id, held


def forget() -> None:
    """Drop every cached copy (tests, and a process that wants its memory back)."""
    with _lock:
        _cache.clear()
