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

    @classmethod
    def from_row(cls, f) -> FactVersion:
        """A fact version from a LOAD_FACTS / LOAD_FACTS_OF_KEY row (a rows.StoredFact: the same fields in
        the same order, its value still JSON)."""
        return cls(*f._replace(value=json.loads(f.value)))


class FactIndex:
    """Every version of every fact in a workspace, ordered by (seq, version), for read resolution.

    Writes arrive almost always in order, so add() appends in O(1) (a bisect otherwise) and the
    next version number is kept per key: a key written by every action stays linear."""

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
        for fv in reversed(self.by_key.get(key, ())):
            if fv.active and (fv.seq < seq or fv.writer == reader):
                if hidden is not None and hidden[0] <= fv.seq < hidden[1] and fv.writer != reader:
                    continue
                return fv
        return None

    def next_version(self, key: str) -> int:
        return self._max_version.get(key, 0) + 1

    def current(self) -> dict[str, FactVersion]:
        out = {}
        for key, versions in self.by_key.items():
            live = [v for v in versions if v.active]
            if live:
                out[key] = live[-1]
        return out


class KeyedFactIndex(FactIndex):
    """A FactIndex that reads a key's versions from the graph the first time a read or a write needs
    them (`load_key(key) -> [FactVersion]`), for a session that touches a few keys of a large memory."""

    def __init__(self, load_key, load_keys=None) -> None:
        super().__init__()
        self._load_key = load_key
        self._load_keys = load_keys  # keys -> [FactVersion] of all of them, for prefetch()
        self._loaded: set[str] = set()

    def prefetch(self, keys) -> None:
        """Read the versions of every key in `keys` not read yet, in one round trip when the index can
        (a batch or a commit knows up front which keys it touches)."""
        missing = sorted({k for k in keys if k not in self._loaded})
        if not missing or self._load_keys is None:
            return
        found = self._load_keys(missing)
        self._loaded.update(missing)
        for fv in found:
            super().add_version(fv)

    def _ensure(self, key: str) -> None:
        if key not in self._loaded:
            self._loaded.add(key)
            for fv in self._load_key(key):
                super().add_version(fv)

    def add_version(self, fv: FactVersion) -> None:
        self._ensure(fv.key)
        super().add_version(fv)

    def resolve(self, key: str, seq: float, reader: int,
                hidden: tuple[float, float] | None = None) -> FactVersion | None:
        self._ensure(key)
        return super().resolve(key, seq, reader, hidden)

    def next_version(self, key: str) -> int:
        self._ensure(key)
        return super().next_version(key)
