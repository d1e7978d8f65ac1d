"""What one execution of an agent did (its reads, writes, handoffs, effects and decision), as the recorder
collects it before it is committed to the graph, and what of it downstream work can see."""
from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Read:
    key: str
    fact_id: int | None
    writer: int | None
    # The incidents whose containment this read resolved around (provenance.containment): it saw the
    # contained view, which its repair's catch-up re-runs against the repaired facts.
    contained: tuple[int, ...] = ()


@dataclass
class ActionRecord:
    """What one execution of an agent did, before it is committed to the graph."""

    id: int
    agent: str
    payload: dict
    seq: float
    parent: int | None
    ticket: str | None
    reads: list[Read] = field(default_factory=list)
    writes: list[dict] = field(default_factory=list)
    handoffs: list[tuple[str, dict]] = field(default_factory=list)
    effects: list[dict] = field(default_factory=list)
    ingested: list[str] = field(default_factory=list)
    decision: dict | None = None
    dhash: str | None = None
    # The seqs this action's reads do not see (provenance.fact_index): set when its recording committed
    # after others that opened later than it; None for a recording nobody committed beside.
    hidden: tuple[float, float] | None = None

    @property
    def read_keys(self) -> list[str]:
        return sorted({r.key for r in self.reads})

    def outputs(self) -> tuple:
        """What downstream work can see of this action: decision, writes, handoffs and effects."""
        return (
            self.dhash,
            tuple(sorted((w["key"], json.dumps(w["value"], sort_keys=True)) for w in self.writes)),
            tuple((a, json.dumps(p, sort_keys=True)) for a, p in self.handoffs),
            tuple(sorted((e["kind"], e["ticket"] or "", e["amount"]) for e in self.effects)),
        )
