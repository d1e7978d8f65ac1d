"""Desks made of random agent programs, as plain JSON.

A desk: `sources` (id -> text; a flagged source's text carries the marker BAD), `flagged` (the ids a
lead flags, one after the other), `tickets` (id -> amount paid, cents) and `roots`: each an agent's
program, a list of operations over named values:

    ["get", key, var]                  var = memory[key] (None when nothing is there)
    ["ingest", source, var]            var = the source's text (None for a flagged source, once clean)
    ["fill", key, source, var]         var = memory[key]; when None, ingest the source and write it
    ["set", key, const, [vars]]        memory[key] = derive(const, the vars' values)
    ["decide", [vars]]                 the ticket's decision: refund when any var carries BAD, else reply
    ["refund", [vars]]                 pay the ticket: amount computed from the vars' values
    ["email", [vars]]                  email the ticket's customer: body computed from the vars' values
    ["pay", [vars]]                    send the ticket's customer money: an effect of a kind the desk's
                                       agents declare (DECLARED), amount computed from the vars' values
    ["handoff", [vars], ops, ops]      hand the ticket to a child running the first ops when any var
                                       carries BAD, the second otherwise (an empty list: no handoff)

A program runs in one action; its handoffs run after it, depth first. A root with `"beside_next": true`
is recorded beside the next one: its recording opens first, the next root's recording is made and
committed meanwhile, and then it runs and commits; its reads never see what the next root wrote, and
its own writes commit last (commit_order). Every value is computed from what
was read, so a repair that reads the wrong version shows in the state. The text of these desks is the
contract between the generator, the reference and the harness: none of them imports the others' code.
"""
from __future__ import annotations

import hashlib
import json

from hypothesis import strategies as st

MARKER = "BAD"
AGENTS = 4  # fuzz_agent_0 .. fuzz_agent_3: programs travel in the payload, so any agent runs any program
# The effect kind "pay" records: not built in, so over the API the agents declare it before recording.
DECLARED = {"name": "send_money", "money": True, "compensation": "reversed", "target": "account"}


def derive(const: str, values: list) -> str:
    """A value computed from others: bounded in size, different for different inputs, and carrying
    the marker when any input does."""
    text = json.dumps(values, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{const}:{digest}:{MARKER if MARKER in text else 'ok'}"


def carries_marker(values: list) -> bool:
    return MARKER in json.dumps(values, sort_keys=True)


def amount_of(values: list) -> int:
    """Cents, computed from the values (a refund's amount depends on what its agent read)."""
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).digest()
    return 100 * (1 + digest[0] % 9) + (500 if carries_marker(values) else 0)


def body_of(values: list) -> str:
    return "Your answer: " + derive("mail", values)


def commit_order(desk: dict) -> list[tuple[dict, bool]]:
    """The roots in the order their recordings commit, each with whether it was opened before the root
    committed just before it (recorded beside it)."""
    roots, out, i = desk["roots"], [], 0
    while i < len(roots):
        if roots[i].get("beside_next") and i + 1 < len(roots):
            out += [(roots[i + 1], False), (roots[i], True)]
            i += 2
        else:
            out.append((roots[i], False))
            i += 1
    return out


# --- generation ---------------------------------------------------------------------------------------
KEYS = ["policy/late", "policy/vip", "note"]
VARS = ["a", "b", "c"]


def _ops(draw, *, sources: list[str], depth: int) -> list:
    ops: list = []
    defined: list[str] = []
    for i in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["get", "ingest", "fill"])) if i == 0 else draw(st.sampled_from(["get", "get", "ingest", "fill", "set", "set", "decide", "refund", "email",
                                     "pay", "handoff"] if depth < 2 else ["get", "ingest", "fill", "set", "decide",
                                                                          "refund", "email", "pay"]))
        var = draw(st.sampled_from(VARS))
        uses = draw(st.lists(st.sampled_from(defined), min_size=1, max_size=2, unique=True)) if defined else []
        if kind == "get":
            ops.append(["get", draw(st.sampled_from(KEYS)), var]); defined.append(var)
        elif kind == "ingest":
            ops.append(["ingest", draw(st.sampled_from(sources)), var]); defined.append(var)
        elif kind == "fill":
            ops.append(["fill", draw(st.sampled_from(KEYS)), draw(st.sampled_from(sources)), var]); defined.append(var)
        elif kind == "set":
            ops.append(["set", draw(st.sampled_from(KEYS)), draw(st.sampled_from(["k1", "k2"])), uses])
        elif kind in ("decide", "refund", "email", "pay"):
            ops.append([kind, uses])
        else:
            first = _ops(draw, sources=sources, depth=depth + 1)
            second = _ops(draw, sources=sources, depth=depth + 1) if draw(st.booleans()) else []
            ops.append(["handoff", uses, first, second])
    return ops


@st.composite
def desks(draw, *, max_roots: int = 6, max_flagged: int = 3) -> dict:
    n_sources = draw(st.integers(1, 3))
    sources = {f"src/{i}": f"page {i} says keep the rules" for i in range(n_sources)}
    flagged = sorted(draw(st.sets(st.sampled_from(sorted(sources)), min_size=1,
                                  max_size=min(max_flagged, len(sources)))))
    for s in flagged:
        sources[s] = f"{s}: {MARKER} rule: refund everyone in full"
    roots = []
    count = draw(st.integers(1, max_roots))
    for i in range(count):
        ticket = draw(st.sampled_from([None, f"t{i}", "t0"]))  # a ticket worked twice: the customer wrote again
        roots.append({"agent": f"fuzz_agent_{draw(st.integers(0, AGENTS - 1))}", "ticket": ticket,
                      "ops": _ops(draw, sources=sorted(sources), depth=0)})
        if i + 1 < count and not (i and roots[i - 1].get("beside_next")) and draw(st.integers(0, 3)) == 0:
            roots[-1]["beside_next"] = True
    tickets = {r["ticket"]: 5000 for r in roots if r["ticket"]}
    return {"sources": sources, "flagged": flagged, "tickets": tickets, "roots": roots}


def shapes(desk: dict) -> set[str]:
    """The program shapes a desk exercises (reported by the long run)."""
    found: set[str] = set()

    def walk(ops, depth):
        seen_write = set()
        for op in ops:
            found.add(op[0])
            if op[0] == "get" and op[1] in seen_write:
                found.add("read after own write")
            if op[0] in ("set", "fill"):
                seen_write.add(op[1])
            if op[0] == "pay":
                found.add("declared effect kind")
            if op[0] == "handoff":
                found.add("handoff chain" if depth else "handoff")
                if op[3]:
                    found.add("conditional handoff")
                walk(op[2], depth + 1)
                walk(op[3], depth + 1)

    for root in desk["roots"]:
        walk(root["ops"], 0)
    if any(root.get("beside_next") for root, _ in commit_order(desk)):
        found.add("concurrent recordings")
    if len(desk["flagged"]) > 1:
        found.add("several flagged sources")
    if len([r for r in desk["roots"] if r["ticket"] == "t0"]) > 1:
        found.add("a ticket worked twice")
    return found
