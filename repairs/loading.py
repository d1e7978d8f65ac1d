"""What the repair walk reads of a set of actions, in one round trip (queries.WALK_LOAD).

The walk needs, for every action of the blast radius: its details, its handoff children, the facts it
wrote, its effects, the facts it read (with their writers) and the FEEDS and HANDED_OFF edges into it.
Each part comes back as one string instead of rows: FalkorDB's client parses a result value by value in
Python, which cost more than the queries themselves (~90 ms of ~130 ms on 1,500 actions). The rows are
rebuilt here as the same row types the separate queries returned.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from provenance.graph import queries
from provenance.graph.graph import Graph, id_set
from provenance.graph.rows import ActionDetail, ActionEffect, ActionRead, ActionWrite, Edge

# Field, row and list-item separators: control characters, which no identifier holds (validation)
# and no JSON text holds raw (the grammar forbids them inside strings, encoders escape them).
FS, RS, LS = "\x1f", "\x1e", "\x1d"


def _rows(text: str, fields: int) -> list[list[str]]:
    if not text:
        return []
    out = [row.split(FS) for row in text.split(RS)]
    if any(len(row) != fields for row in out):  # a separator inside a value: never read it shifted
        raise ValueError(f"a packed walk row does not have {fields} fields")
    return out


def _opt_int(text: str) -> int | None:
    return int(text) if text else None


def _opt_bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text)


class _Fact(NamedTuple):
    key: str
    version: int
    writer: int


class Loaded:
    """The parts of queries.WALK_LOAD for one id set, as rows."""

    def __init__(self, graph: Graph, ids: list[int], facts: Mapping[int, Any] | None = None):
        """`facts`: fact versions by id (FactVersion-like: key, version, writer) to resolve the reads
        with; those it lacks are read from the graph."""
        params = {**id_set(ids), "fs": FS, "rs": RS, "ls": LS}
        parts = {r.part: r for r in graph.ro_query(queries.WALK_LOAD, params)}
        children: dict[int, list[int]] = {}
        if "children" in parts:
            for parent, child in _rows(parts["children"].text, 2):
                children.setdefault(int(parent), []).append(int(child))
        self.actions: list[ActionDetail] = []
        if "actions" in parts:
            seqs = parts["actions"].seqs
            rows = _rows(parts["actions"].text, 9)
            if len(rows) != len(seqs):
                raise ValueError("packed walk actions and their seqs are not aligned")
            for (aid, agent, ticket, payload, decision, dhash, status, parent, keys), seq in zip(rows, seqs):
                aid = int(aid)
                self.actions.append(ActionDetail(aid, agent, seq, ticket or None, payload, decision, dhash or None,
                                                 status, _opt_int(parent), keys.split(LS) if keys else [],
                                                 children.get(aid, [])))
        self.writes = [ActionWrite(int(a), int(f), key, value)
                       for a, f, key, value in _rows(parts["writes"].text if "writes" in parts else "", 4)]
        self.effects = [ActionEffect(int(a), int(e), kind, ticket or None, _opt_int(amount), currency or None,
                                     details or None, _opt_bool(live), _opt_bool(held))
                        for a, e, kind, ticket, amount, currency, details, live, held
                        in _rows(parts["effects"].text if "effects" in parts else "", 9)]
        reads = [(int(a), int(f)) for a, f in _rows(parts["reads"].text if "reads" in parts else "", 2)]
        known: Mapping[int, Any] = facts or {}
        if any(f not in known for _, f in reads):
            found = graph.ro_query(queries.WALK_READ_FACTS, params)
            known = {int(f): _Fact(key, int(version), int(writer)) for f, key, version, writer
                     in _rows(found[0].text if found else "", 4)}
        # (reader, fact id) beside each read: which READ edges the action has now.
        self.reads: list[tuple[ActionRead, int]] = [
            (ActionRead(a, known[f].key, known[f].version, known[f].writer), f) for a, f in reads]
        self.preds = [Edge(int(a), int(p), kind) for a, p, kind in _rows(parts["preds"].text if "preds" in parts else "", 3)]
