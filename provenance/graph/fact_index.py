"""The versions of a workspace's facts in memory, in the order reads resolve them: the recorder's mirror
of the graph's Fact nodes (the latest active version written before the reader's seq wins).

A reader recorded beside other recordings also names the seqs it did not see (`hidden`, a half-open
range [from, to)): the recordings committed after its snapshot was taken and before its own. Its
snapshot is everything below `from`, plus its own recording's writes from `to` up to its seq."""
from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from provenance.graph import queries


@dataclass
class FactVersion:
    id: int
    key: str
    value: Any
    version: int
    seq: float
    active: bool
    writer: int | None
    valid_from: str | None = None
    valid_until: str | None = None
    known_at: str | None = None
    system_at: str | None = None
    invalidated_at: str | None = None
    invalidated_by: int | None = None
    contained: list[int] | None = None  # incidents whose containment hides it from live reads

    @classmethod
    def from_row(cls, f) -> FactVersion:
        """A fact version from a LOAD_FACTS / LOAD_FACTS_OF_KEYS row (a rows.StoredFact: the same fields in
        the same order, its value still JSON)."""
        return cls(*f._replace(value=json.loads(f.value)))


class FactIndex:
    """Every version of every fact in a workspace, ordered by (seq, version), for read resolution.

    Writes arrive almost always in order, so add() appends in O(1) (a bisect otherwise) and the
    next version number is kept per key: a key written by every action stays linear.

    With `contain` (a live recording's view, provenance.recording.containment) a read resolves as if a contained
    version did not exist; `skipped` says which incidents' containment the last read passed over."""

    contain = False

    def __init__(self) -> None:
        self.by_key: dict[str, list[FactVersion]] = defaultdict(list)
        self.by_id: dict[int, FactVersion] = {}
        self._order: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self._max_version: dict[str, int] = {}

    def add_version(self, fv: FactVersion) -> None:
        order, position = self._order[fv.key], (fv.seq, fv.version)
        at = len(order) if not order or order[-1] <= position else bisect.bisect(order, position)
        order.insert(at, position)
        self.by_key[fv.key].insert(at, fv)
        self.by_id[fv.id] = fv
        self._max_version[fv.key] = max(self._max_version.get(fv.key, 0), fv.version)

    def resolve(self, key: str, seq: float, reader: int,
                hidden: tuple[float, float] | None = None) -> FactVersion | None:
        """The version a read by the action `reader` at `seq` sees: the newest active one below its seq
        and outside `hidden`. Never one the reader wrote itself: its writes of this execution are answered
        by the ActionRecorder from the record, and a stored one is of an earlier execution (the original run a
        repair re-runs), which may carry the very poison being repaired."""
        self.skipped: tuple[int, ...] = ()
        for fv in reversed(self.by_key.get(key, ())):
            if fv.active and fv.seq < seq and fv.writer != reader:
                if hidden is not None and hidden[0] <= fv.seq < hidden[1]:
                    continue
                if self.contain and fv.contained and fv.writer != reader:
                    self.skipped = tuple(sorted(set(self.skipped).union(fv.contained)))
                    continue
                return fv
        return None

    def next_version(self, key: str) -> int:
        return self._max_version.get(key, 0) + 1

    def prefetch(self, keys) -> None:
        """Nothing to read: every version is here (KeyedFactIndex reads keys it is about to need)."""

    def current(self) -> dict[str, FactVersion]:
        out = {}
        for key, versions in self.by_key.items():
            live = [v for v in versions if v.active]
            if live:
                out[key] = live[-1]
        return out


class KeyedFactIndex(FactIndex):
    """A FactIndex that reads a key from `graph` the first time a read or a write needs it, for a session
    that touches a few keys of a large memory; `below`: only the versions below that seq (a recording's
    snapshot), all of them when None.

    Of a key it first reads only what decides a read resolved above its versions and its next version
    number (queries.LOAD_FACT_HEADS): the highest version number, and the newest active version with the
    active ones at its seq. Every version after that one is inactive, so a read that stops at it or
    later answers as it would on the whole history; one that passes it (resolved below it, or with it
    hidden, or after a retire) reads the key's whole history and resolves again. A key written by every
    recording then costs each recording the same at its thousandth version as at its first."""

    def __init__(self, graph, *, below: float | None = None, contain: bool = False) -> None:
        super().__init__()
        self._graph, self._below, self.contain = graph, below, contain
        self._loaded: set[str] = set()
        self._whole: set[str] = set()
        self._head: dict[str, tuple[float, int]] = {}  # (seq, version) of each key's newest active stored version

    def prefetch(self, keys) -> None:
        """Read the keys in `keys` not read yet, in one round trip (a batch or a commit knows up front
        which keys it touches)."""
        asked = self.ask_heads(keys)
        if asked is not None:
            self.take_heads(asked[1], self._graph.ro_query(*asked))

    def ask_heads(self, keys) -> tuple[str, dict] | None:
        """The query prefetch() sends for `keys` and its parameters (None: every key is read), for a
        caller that sends it in a pipeline with others; its rows go to take_heads()."""
        missing = sorted({k for k in keys if k not in self._loaded})
        return (queries.LOAD_FACT_HEADS, {"keys": missing, "below": self._below}) if missing else None

    def take_heads(self, params: dict, rows) -> None:
        """What LOAD_FACT_HEADS answered for the keys in `params`."""
        self._loaded.update(params["keys"])
        for row in rows:
            self._max_version[row.key] = max(self._max_version.get(row.key, 0), row.top)
            if row.fact is not None:
                fv = FactVersion.from_row(row.fact)
                super().add_version(fv)
                self._head[fv.key] = max(self._head.get(fv.key, (fv.seq, fv.version)), (fv.seq, fv.version))

    def _load_whole(self, key: str) -> None:
        self._whole.add(key)
        for f in self._graph.ro_query(queries.LOAD_FACTS_OF_KEYS, {"keys": [key]}):
            # The versions already here keep their state (and their objects: a caller may hold one).
            if (self._below is None or f.seq < self._below) and f.id not in self.by_id:
                super().add_version(FactVersion.from_row(f))

    def _ensure(self, key: str) -> None:
        if key not in self._loaded:
            self.prefetch([key])

    def add_version(self, fv: FactVersion) -> None:
        self._ensure(fv.key)
        super().add_version(fv)

    def resolve(self, key: str, seq: float, reader: int,
                hidden: tuple[float, float] | None = None) -> FactVersion | None:
        self._ensure(key)
        found = super().resolve(key, seq, reader, hidden)
        head = self._head.get(key)
        if head is not None and key not in self._whole and (found is None or (found.seq, found.version) < head):
            self._load_whole(key)
            found = super().resolve(key, seq, reader, hidden)
        return found

    def next_version(self, key: str) -> int:
        self._ensure(key)
        return super().next_version(key)
