"""The reference interpreter: runs a desk (bench.fuzzdesk.programs) the way its text says, with or
without the flagged sources, and returns the state a clean run leaves. It shares no code with
kintsugi's recorder, repair or verification: memory here is a dict of key -> list of values.

Semantics: roots run in order; an action's program runs top to bottom; its handoffs run after it, in
order, each depth first. A read sees every write committed before its action started, plus its own
action's earlier writes. A flagged source, when excluded, reads as None. A root recorded beside the next
one (`beside_next`) runs after it against the memory as it was before it, and what it writes lands
after what the next one wrote.
"""
from __future__ import annotations

import hashlib
import json

from bench.fuzzdesk.programs import DECLARED, amount_of, body_of, carries_marker, derive


def effect_digest(kind: str, ticket: str | None, amount: int, body: str | None) -> str:
    text = json.dumps([kind, ticket, amount, body], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Run:
    def __init__(self, desk: dict, *, excluded: set[str]):
        self.desk, self.excluded = desk, excluded
        self.memory: dict[str, object] = {}
        self.decisions: dict[str, str] = {}
        self.effects: list[dict] = []

    def action(self, ticket: str | None, ops: list) -> list[tuple[str | None, list]]:
        env: dict[str, object] = {}
        own: dict[str, object] = {}
        handoffs: list[tuple[str | None, list]] = []

        def read(key):
            return own[key] if key in own else self.memory.get(key)

        def values(names):
            return [env.get(n) for n in names]

        for op in ops:
            kind = op[0]
            if kind == "get":
                env[op[2]] = read(op[1])
            elif kind == "ingest":
                env[op[2]] = None if op[1] in self.excluded else self.desk["sources"][op[1]]
            elif kind == "fill":
                value = read(op[1])
                if value is None:
                    value = None if op[2] in self.excluded else self.desk["sources"][op[2]]
                    if value is not None:
                        own[op[1]] = value
                env[op[3]] = value
            elif kind == "set":
                own[op[1]] = derive(op[2], values(op[3]))
            elif kind == "decide":
                if ticket:
                    self.decisions[ticket] = "refund" if carries_marker(values(op[1])) else "reply"
            elif kind == "refund":
                if ticket:
                    amount = amount_of(values(op[1]))
                    self.effects.append({"kind": "refund", "ticket": ticket, "amount_cents": amount,
                                         "digest": effect_digest("refund", ticket, amount, None)})
            elif kind == "email":
                if ticket:
                    body = body_of(values(op[1]))
                    self.effects.append({"kind": "email", "ticket": ticket, "amount_cents": 0,
                                         "digest": effect_digest("email", ticket, 0, body)})
            elif kind == "pay":
                if ticket:
                    amount = amount_of(values(op[1]))
                    self.effects.append({"kind": DECLARED["name"], "ticket": ticket, "amount_cents": amount,
                                         "digest": effect_digest(DECLARED["name"], ticket, amount, None)})
            elif kind == "handoff":
                chosen = op[2] if carries_marker(values(op[1])) else op[3]
                if chosen:
                    handoffs.append((ticket, chosen))
        self.memory.update(own)  # committed when the action ends
        self.written.update(own)
        return handoffs

    def root(self, root: dict) -> dict:
        """Run a root and its handoffs; what they wrote, the last value of each key."""
        self.written: dict[str, object] = {}
        stack = [(root["ticket"], root["ops"])]
        while stack:
            ticket, ops = stack.pop()
            stack.extend(reversed(self.action(ticket, ops)))
        return self.written

    def run(self) -> dict:
        roots, i = self.desk["roots"], 0
        while i < len(roots):
            if roots[i].get("beside_next") and i + 1 < len(roots):
                before = dict(self.memory)
                self.root(roots[i + 1])
                after, self.memory = self.memory, before
                after.update(self.root(roots[i]))
                self.memory = after
                i += 2
            else:
                self.root(roots[i])
                i += 1
        return {
            "facts": {k: v for k, v in sorted(self.memory.items())},
            "decisions": dict(sorted(self.decisions.items())),
            "effects": sorted(self.effects, key=lambda e: (e["kind"], e["ticket"], e["amount_cents"], e["digest"])),
        }


def run(desk: dict, *, clean: bool) -> dict:
    """The state after recording `desk`; `clean`: as if the flagged sources never existed."""
    return Run(desk, excluded=set(desk["flagged"]) if clean else set()).run()
