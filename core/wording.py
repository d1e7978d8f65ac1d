"""Counts in plain words: "1 case", "1,516 cases", never "case(s)" nor "1516"."""
from __future__ import annotations

# Plurals that are not the singular plus "s".
_IRREGULAR = {"delivery": "deliveries", "entry": "entries", "reply": "replies", "policy": "policies",
              "is": "are", "was": "were", "this": "these", "it": "they"}


def plural(word: str, n: int) -> str:
    """`word` as it goes with `n` things."""
    if n == 1:
        return word
    return _IRREGULAR.get(word, word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s"))


def counted(n: int, word: str) -> str:
    """`n` with thousands separators and `word` made to agree: counted(1516, "case") == "1,516 cases"."""
    return f"{n:,} {plural(word, n)}"
