"""What one execution of an agent did (its reads, writes, handoffs, effects and decision), as the recorder
collects it before it is committed to the graph, and what of it downstream work can see."""
from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass, field

# The details of a message whose words are compared in their canonical form (line endings, runs of
# whitespace and Unicode composition do not make two messages different).
MESSAGE_TEXT = ("subject", "body")


def _canonical_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def content_digest(details: dict | None) -> str:
    """A digest of what an effect's details say: every detail as stored, a message's subject and body
    in their canonical form."""
    canonical = {k: (_canonical_text(v) if k in MESSAGE_TEXT and isinstance(v, str) else v)
                 for k, v in (details or {}).items()}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def effect_content(effect: dict) -> tuple:
    """What an effect says, as a re-run and verification compare it: kind, target ticket, amount,
    currency and the digest of its details (for a message: recipient, subject and body). Two effects
    with the same content are the same effect, whatever the agent returned beside them."""
    return (effect["kind"], effect.get("ticket") or "", effect.get("amount") or 0, effect.get("currency") or "",
            content_digest(effect.get("details")))


@dataclass
class Read:
    key: str
    fact_id: int | None
    writer: int | None
    # The incidents whose containment this read resolved around (provenance.recording.containment): it saw the
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
    # The seqs this action's reads do not see (provenance.graph.fact_index): set when its recording committed
    # after others that opened later than it; None for a recording nobody committed beside.
    hidden: tuple[float, float] | None = None

    @property
    def read_keys(self) -> list[str]:
        return sorted({r.key for r in self.reads})

    def outputs(self) -> tuple:
        """What downstream work can see of this action: decision, writes, handoffs and effects (by what
        each says, provenance.recording.action_record.effect_content)."""
        return (
            self.dhash,
            tuple(sorted((w["key"], json.dumps(w["value"], sort_keys=True)) for w in self.writes)),
            tuple((a, json.dumps(p, sort_keys=True)) for a, p in self.handoffs),
            tuple(sorted(effect_content(e) for e in self.effects)),
        )
