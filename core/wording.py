"""Counts in plain words: "1 case", "1,516 cases", never "case(s)" nor "1516"."""
from __future__ import annotations

# Plurals that are not the singular plus "s".
_IRREGULAR = {"delivery": "deliveries", "entry": "entries", "reply": "replies", "policy": "policies",
              "is": "are", "was": "were", "this": "these", "it": "them", "does": "do", "needs": "need",
              "stays": "stay"}
_PAST = {"approve": "approved", "reject": "rejected", "claim": "claimed", "unassign": "unassigned", "undo": "undone"}


def plural(word: str, n: int) -> str:
    """`word` as it goes with `n` things."""
    if n == 1:
        return word
    return _IRREGULAR.get(word, word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s"))


def past(verb: str) -> str:
    """"approve" → "approved", "reject" → "rejected" (never "rejectd")."""
    return _PAST.get(verb, verb if verb.endswith("ed") else verb + ("d" if verb.endswith("e") else "ed"))


def counted(n: int, word: str) -> str:
    """`n` with thousands separators and `word` made to agree: counted(1516, "case") == "1,516 cases"."""
    return f"{n:,} {plural(word, n)}"


def event_words(action: str) -> str:
    """An audit action as people read it: "item.decision_undone" → "Item: decision undone"."""
    subject, _, verb = (action or "").partition(".")
    if not verb:
        return subject.replace("_", " ").capitalize()
    return f"{subject.replace('_', ' ').capitalize()}: {verb.replace('_', ' ')}"
