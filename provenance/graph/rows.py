"""The rows the graph queries return (provenance.graph.queries names each query's row type).

Graph.query and Graph.ro_query build these from FalkorDB's result rows, so callers read columns by
name. They are tuples, so code that unpacks a row still works; the names are what keeps a column
added to a RETURN from silently shifting the others.
"""
from __future__ import annotations

from typing import NamedTuple


class ActionId(NamedTuple):
    id: int


class RadiusAction(NamedTuple):
    """An action of a blast radius (provenance.recording.selectors.radius_actions), in seq order."""
    id: int
    seq: float


class Count(NamedTuple):
    n: int


class MaxIds(NamedTuple):
    action: int | None
    fact: int | None
    effect: int | None


class Packed(NamedTuple):
    """One string packing many values (the radius and the topology mirror: see queries)."""
    text: str


class PackedPart(NamedTuple):
    """One part of what the repair walk loads (queries.WALK_LOAD), packed into one string."""
    part: str
    text: str
    seqs: list[float]


class PackedActions(NamedTuple):
    actions: str
    tickets: list[str]


class RadiusPreview(NamedTuple):
    actions: str
    tickets: list[str]
    effects: str


class Seq(NamedTuple):
    seq: float


class Tickets(NamedTuple):
    tickets: list[str]


class Ingest(NamedTuple):
    action: int
    source: str


class StoredFact(NamedTuple):
    """A fact version and its writer, with the three clocks: what the recorder resolves reads against."""
    id: int
    key: str
    value: str
    version: int
    seq: float
    active: bool
    writer: int
    valid_from: str | None
    valid_until: str | None
    known_at: str | None
    system_at: str | None
    invalidated_at: str | None
    invalidated_by: int | None
    contained: list[int] | None = None  # the incidents whose containment hides it from live reads


class FactHead(NamedTuple):
    """Of a fact key, its highest version number (`top`) and one active version at the seq of its newest
    active one (queries.LOAD_FACT_HEADS): the StoredFact's columns, None when no version is active."""
    top: int
    id: int | None
    key: str
    value: str | None
    version: int | None
    seq: float | None
    active: bool | None
    writer: int | None
    valid_from: str | None
    valid_until: str | None
    known_at: str | None
    system_at: str | None
    invalidated_at: str | None
    invalidated_by: int | None
    contained: list[int] | None = None

    @property
    def fact(self) -> StoredFact | None:
        return None if self.id is None else StoredFact(*self[1:])


class FactVersion(NamedTuple):
    """One version of a key in its history, with who wrote it."""
    id: int
    value: str
    version: int
    seq: float
    active: bool
    valid_from: str | None
    valid_until: str | None
    known_at: str | None
    system_at: str | None
    invalidated_at: str | None
    invalidated_by: int | None
    writer: int
    agent: str


class FactValue(NamedTuple):
    key: str
    version: int
    value: str
    active: bool


class ActiveFact(NamedTuple):
    key: str
    value: str
    seq: float
    version: int


class ActionSummary(NamedTuple):
    id: int
    agent: str
    seq: float
    ticket: str | None
    status: str


class ActionDetail(NamedTuple):
    """What the repair walk needs of an action: its inputs, its decision and its handoff children."""
    id: int
    agent: str
    seq: float
    ticket: str | None
    payload: str
    decision: str
    dhash: str | None
    status: str
    parent: int | None
    read_keys: list[str] | None
    children: list[int]


class ActionWrite(NamedTuple):
    action: int
    fact: int
    key: str
    value: str


class ActionKeys(NamedTuple):
    id: int
    parent: int | None
    read_keys: list[str] | None
    written: list[str]


class ActionEffect(NamedTuple):
    action: int
    id: int
    kind: str
    ticket: str | None
    amount: int | None
    currency: str | None
    details: str | None
    live: bool
    held: bool


class ActionRead(NamedTuple):
    action: int
    key: str
    version: int
    writer: int


class EffectOfAction(NamedTuple):
    id: int
    kind: str
    ticket: str | None
    amount: int | None
    live: bool


class EffectKindAmount(NamedTuple):
    kind: str
    ticket: str | None
    amount: int | None


class LiveDecision(NamedTuple):
    ticket: str
    seq: float
    decision: str


class LiveEffect(NamedTuple):
    id: int
    kind: str
    ticket: str | None
    amount: int | None
    held: bool
    action: int
    currency: str | None
    details: str | None


class RootAction(NamedTuple):
    id: int
    agent: str
    seq: float
    payload: str
    snap: float | None


class HiddenSeqs(NamedTuple):
    id: int
    snap: float
    rstart: float


class FactId(NamedTuple):
    id: int


class ContainedFact(NamedTuple):
    id: int
    key: str
    version: int


class FactMarks(NamedTuple):
    id: int
    contained: list[int]


class EffectLive(NamedTuple):
    id: int
    live: bool


class ActionFact(NamedTuple):
    """A fact version an action read (`edge` READ) or wrote (WROTE), with its writer."""
    action: int
    edge: str
    id: int
    key: str
    version: int
    value: str
    active: bool
    writer: int
    invalidated_by: int | None


class Edge(NamedTuple):
    """A FEEDS or HANDED_OFF edge seen from `action`: `other` is its successor or its predecessor,
    as the query says."""
    action: int
    other: int
    kind: str


class EffectCauser(NamedTuple):
    action: int
    kind: str
    ticket: str | None
    amount: int | None
    currency: str | None
    live: bool
    held: bool


class EffectStateCount(NamedTuple):
    kind: str
    live: bool
    held: bool
    count: int
    amount: int | None


class CachedValue(NamedTuple):
    value: str


class CachedResponse(NamedTuple):
    key: str
    value: str



# --- trust, suspicion and time travel ---
class FactLineage(NamedTuple):
    """A fact version with its writer, the sources the writer ingested and the fact ids it read."""
    id: int
    key: str
    value: str  # JSON
    version: int
    seq: float
    active: bool
    writer: int
    writer_status: str
    sources: list[str]
    read: list[int]


class SourceFirstSeen(NamedTuple):
    source: str
    action: int
    seq: float
    ran_at: str | None
    ingesters: int


class ActionRecord(NamedTuple):
    id: int
    agent: str
    seq: float
    ticket: str | None
    status: str
    ran_at: str | None
    incident: int | None
    decision: str | None
    prev_decision: str | None
    read_keys: list[str] | None
    parent: int | None
    ingested: list[str]


class FactRef(NamedTuple):
    key: str
    version: int


class RanAt(NamedTuple):
    ran_at: str | None
