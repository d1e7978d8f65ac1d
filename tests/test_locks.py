"""The advisory-lock namespaces: one registry, no number used twice, none spelled out elsewhere."""
import re
from pathlib import Path

from core import locks

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("core", "provenance", "repairs", "compensation", "kintsugi_site")


def _product_sources():
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts and path != ROOT / "core" / "locks.py":
                yield path, path.read_text()


def test_no_two_namespaces_share_a_number():
    values = list(locks.NAMESPACES.values())
    assert len(values) >= 6 and len(set(values)) == len(values)
    assert locks.NAMESPACES["AUDIT_CHAIN"] not in {v for k, v in locks.NAMESPACES.items() if k != "AUDIT_CHAIN"}


def test_every_advisory_lock_takes_its_namespace_from_the_registry():
    numbers = {str(v) for v in locks.NAMESPACES.values()}
    for path, text in _product_sources():
        for number in re.findall(r"\b\d{4,}\b", text):
            assert number not in numbers, f"{path.relative_to(ROOT)} spells out lock namespace {number}"
        # Every advisory-lock call passes two keys, so it can never meet a one-key lock, and its first
        # key is a name (imported from the registry), not a literal.
        for call in re.findall(r"pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock\(([^)]*)\)", text):
            assert call.count(",") == 1 and not re.match(r"\s*\d", call), f"{path.relative_to(ROOT)}: {call}"
    uses = {name: [p for p, t in _product_sources() if f"locks.{name}" in t] for name in locks.NAMESPACES}
    assert all(uses.values()), f"namespaces nobody takes: {[n for n, u in uses.items() if not u]}"
