"""A whole finished recording built in your process and recorded in one request (`POST
/api/v1/recording/batch/`): an agent that records after the fact, or uploads a trace it kept.

    batch = RecordingBatch()
    triage = batch.action("triage", {"ticket": "t01"})
    triage.ingest("kb/policy"); triage.get("policy/refunds"); triage.set("seen/t01", True)
    triage.handoff("refund", {"ticket": "t01"})
    triage.finish({"choice": "refund"})
    refund = batch.action("refund", parent=triage)       # its payload is the one the handoff recorded
    refund.effect("refund", amount=500, ticket="t01", idempotency_key="refund-t01")
    refund.finish({"refunded": 500})
    answer = client.record_batch(batch)                   # {"committed", "actions": [ids], "results"}

Actions go in the order the in-process recorder runs them: depth first, each handoff opened after its
parent finishes, the last handoff first; kintsugi refuses any other order, and records all of it or
nothing (the refusal names the action and the call). Reads are answered by kintsugi as it records them,
against the workspace's memory and what the recording's earlier actions wrote (`results`).
"""
from __future__ import annotations

import uuid
from typing import Any

from kintsugi_client.client import effect_body

__all__ = ["BatchAction", "RecordingBatch"]


class BatchAction:
    """One action of a RecordingBatch: its calls, in the order they were made."""

    def __init__(self, batch: "RecordingBatch", index: int, spec: dict):
        self.batch, self.index, self.spec = batch, index, spec
        self._effects = 0

    def _call(self, op: str, body: dict) -> "BatchAction":
        if self.spec["calls"] and self.spec["calls"][-1]["op"] == "finish":
            raise ValueError(f"action {self.index} ({self.spec['agent']}) is finished")
        self.spec["calls"].append({"op": op, **body})
        return self

    def ingest(self, source_id: str) -> "BatchAction":
        return self._call("ingest", {"source": source_id})

    def get(self, key: str, default: Any = None) -> "BatchAction":
        return self._call("get", {"key": key, "default": default})

    def set(self, key: str, value: Any, **clocks: str) -> "BatchAction":
        """`clocks`: valid_from, valid_until, observed_at, as the single set call takes them."""
        return self._call("set", {"key": key, "value": value, **clocks})

    def handoff(self, agent: str, payload: dict) -> "BatchAction":
        return self._call("handoff", {"agent": agent, "payload": payload})

    def effect(self, kind: str, *, amount: int = 0, ticket: str | None = None, currency: str = "USD",
               idempotency_key: str | None = None, external: bool | None = None, **details: Any) -> "BatchAction":
        """`idempotency_key`: the key you carried to the provider; by default one unique to this batch."""
        self._effects += 1
        return self._call("effect", effect_body(
            kind, amount=amount, ticket=ticket, currency=currency, external=external, details=details,
            idempotency_key=idempotency_key or f"batch-{self.batch.id}-{self.index}-{self._effects}"))

    def finish(self, decision: dict) -> "BatchAction":
        return self._call("finish", {"decision": decision})


class RecordingBatch:
    """The actions of a whole finished recording, in the order they ran (`actions`: the request's list)."""

    def __init__(self) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.actions: list[dict] = []
        self._actions: list[BatchAction] = []

    def action(self, agent: str, payload: dict | None = None, *, parent: BatchAction | int | None = None) -> BatchAction:
        """A root (with its payload), or the handoff of `parent` (an earlier action; the payload is the
        one its handoff recorded, so it may be left out)."""
        spec: dict = {"agent": agent, "calls": []}
        if payload is not None:
            spec["payload"] = payload
        if parent is not None:
            spec["parent"] = parent.index if isinstance(parent, BatchAction) else parent
        self.actions.append(spec)
        self._actions.append(BatchAction(self, len(self.actions) - 1, spec))
        return self._actions[-1]

    def __len__(self) -> int:
        return len(self.actions)
