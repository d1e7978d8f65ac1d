import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.recording.selectors import blast_radius, export_state
from provenance.recording.services import desk_run, get_workspace

pytestmark = pytest.mark.django_db(transaction=True)


def test_canonical_run_records_the_articles_numbers():
    summary = desk_run(workspace="canon")
    assert summary["actions"] == 66
    assert summary["tickets"] == 24
    assert summary["tickets_read_vip_rules"] == 8
    assert summary["vip_rules_refund_total"] == 750
    agents = dict(workspace_graph("canon").ro_query("MATCH (a:Action) RETURN a.agent, count(a)"))
    assert agents == {"research": 3, "triage": 24, "refund": 15, "notifier": 24}


def test_blast_radius_of_poisoned_page_is_25_actions_in_seq_order():
    desk_run(workspace="canon")
    radius = blast_radius(workspace=get_workspace("canon"), source=POISONED_PAGE)
    seqs = [a["seq"] for a in radius["actions"]]
    assert radius["size"] == 25 and len(seqs) == 25
    assert seqs == sorted(seqs)
    assert radius["tickets"] == 8
    assert radius["amount_at_stake"] == 750


def test_same_seed_gives_identical_graph():
    desk_run(workspace="gen-a", tickets=60, seed=7)
    desk_run(workspace="gen-b", tickets=60, seed=7)
    desk_run(workspace="gen-c", tickets=60, seed=8)
    q = ("MATCH (a:Action) OPTIONAL MATCH (a)-[r]->(b) "
         "RETURN a.id, a.agent, a.seq, a.ticket, a.dhash, type(r), coalesce(b.id, '') ORDER BY a.id, type(r), coalesce(b.id, '')")
    a, b, c = (workspace_graph(w).ro_query(q) for w in ("gen-a", "gen-b", "gen-c"))
    assert a == b
    assert a != c


def test_exclude_source_records_as_if_the_page_never_existed():
    summary = desk_run(workspace="clean", exclude_source=POISONED_PAGE)
    assert summary["actions"] == 61
    assert summary["vip_rules_refund_total"] == 295 + 55  # three genuine VIPs in full, one unopened return at 50%
    facts = {f["key"]: f["value"] for f in export_state(workspace="clean")["facts"]}
    assert "no checks" not in facts["vip_rules"]
