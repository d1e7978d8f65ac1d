"""A stored fact row (rows.StoredFact, as LOAD_FACTS returns it) becomes the recorder's FactVersion field
for field: the two types must keep the same fields in the same order."""
import json
from dataclasses import astuple, fields

from provenance.graph.fact_index import FactVersion
from provenance.graph.rows import StoredFact


def test_the_two_fact_types_have_the_same_fields_in_the_same_order():
    assert [f.name for f in fields(FactVersion)] == list(StoredFact._fields)


def test_a_stored_row_becomes_a_fact_version_with_its_value_parsed():
    row = StoredFact(7, "vip_rules", json.dumps({"full": True}), 2, 3.5, True, 11, "2026-01-01", None,
                     "2026-01-02", "2026-01-03", None, None)
    fv = FactVersion.from_row(row)
    assert fv.value == {"full": True}
    assert astuple(fv) == (*row[:2], {"full": True}, *row[3:])
    assert (fv.writer, fv.known_at, fv.system_at) == (11, "2026-01-02", "2026-01-03")
