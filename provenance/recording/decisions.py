"""What an agent's decision must be, and its hash: the part of the recorder's contract that the
in-process recorder and the HTTP recording protocol share."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from core.errors import DomainError


class MalformedDecision(DomainError, TypeError):
    pass  # a 400 "invalid", like every malformed input


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def decision_hash(decision: dict) -> str:
    """SHA-256 over sorted-key JSON of the structured decision fields (no floats: they drift)."""
    return hashlib.sha256(json.dumps(decision, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_decision(agent: str, decision: Any) -> dict:
    """The decision an agent returned, refused unless it is a dict of JSON values without floats."""
    if not isinstance(decision, dict):
        raise MalformedDecision(f"agent {agent!r} must return a dict decision, got {type(decision).__name__}")

    def walk(value: Any) -> None:
        if isinstance(value, float):
            raise MalformedDecision(f"agent {agent!r} returned a float in its decision; use integers (cents, levels)")
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(decision)
    return decision
