"""One vocabulary: product code names the members of core.vocabulary (and the models' enums built from
it), never the bare strings; every registered audit action is written by some module."""
import ast
import re
from pathlib import Path

from compensation.models import CompensationItem
from core.vocabulary import AUDIT_ACTIONS, AuditAction, EffectRole, ItemKind, Role, Via
from provenance.models import Recording
from repairs.models import Incident
from tests.vocabulary_scan import Bare, bare_words

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("core", "provenance", "repairs", "compensation", "kintsugi_site")
VOCABULARY = {
    "via": set(Via.values),
    "action": set(AUDIT_ACTIONS),
    "status": set(Incident.Status.values) | set(CompensationItem.Status.values) | set(Recording.Status.values),
    "role": set(Role.values) | set(EffectRole.values),
    "kind": set(ItemKind.values),
}


def _product_sources():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts and path != ROOT / "core" / "vocabulary.py":
                yield path, path.read_text()


def test_no_product_module_spells_out_a_word_of_the_vocabulary():
    found = [f"{path.relative_to(ROOT)}:{b.line}: {b.category} {b.word!r}"
             for path, text in _product_sources() for b in bare_words(text, VOCABULARY)]
    assert not found, "bare vocabulary strings (name the enum member instead):\n" + "\n".join(found)


def test_a_bare_word_is_caught():
    snippet = '''
VIA = "admin"

def close(*, via="worker", reason=""):
    audit.record(action="item.approved", via="cli", subject_type="compensation_item")
    if item.status == "pending" or incident.status in ("open", "blocked"):
        items.filter(kind="refund_reversal", role="invalidated")
    return {"via": "mcp", "action": "store_true"}
'''
    assert set(bare_words(snippet, VOCABULARY)) == {
        Bare(2, "via", "admin"), Bare(4, "via", "worker"), Bare(5, "action", "item.approved"), Bare(5, "via", "cli"),
        Bare(6, "status", "blocked"), Bare(6, "status", "open"), Bare(6, "status", "pending"),
        Bare(7, "kind", "refund_reversal"), Bare(7, "role", "invalidated"), Bare(8, "via", "mcp"),
    }
    # The enum members themselves, and strings that are no word of the vocabulary, pass.
    assert bare_words('audit.record(action=AuditAction.ITEM_APPROVED, via=Via.CLI)\n'
                      'parser.add_argument("--json", action="store_true")\n', VOCABULARY) == []


def test_no_product_module_spells_out_an_audit_action_anywhere():
    for path, text in _product_sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value in AUDIT_ACTIONS:
                raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} spells out audit action {node.value!r}")


def test_every_registered_audit_action_is_written_by_some_module():
    sources = "\n".join(text for _, text in _product_sources())
    # Incident and recording actions are derived from the status they move to (of_incident, of_recording).
    derived = {a for a in AuditAction if re.match(r"(incident|recording)\.", a.value)}
    assert "AuditAction.of_incident(" in sources and "AuditAction.of_recording(" in sources
    unwritten = [a.name for a in AuditAction if a not in derived and f"AuditAction.{a.name}" not in sources]
    assert not unwritten, f"audit actions nobody writes: {unwritten}"
    assert {AuditAction.of_incident(s).value for s in Incident.Status.values} | {AuditAction.INCIDENT_FLAGGED} \
        == {a.value for a in derived if a.value.startswith("incident.")}
    assert {AuditAction.of_recording(s).value for s in Recording.Status.values if s != Recording.Status.OPEN} \
        == {a.value for a in derived if a.value.startswith("recording.")}
