"""The LangGraph example desk recorded over HTTP, its poisoned note flagged, its nodes re-run through
its replay endpoint: the repaired workspace is what the same desk records without the note."""
import json

import pytest

from kintsugi_client.langgraph import KintsugiStore, memory_key
from kintsugi_client.signing import sign
from provenance.selectors import export_state
from repairs.job import run_repair
from tests.helpers import open_incident


@pytest.mark.django_db(transaction=True)
def test_langgraph_desk_repaired_through_its_replay_endpoint_equals_its_clean_recording_and_refuses_forged_replays(
        example_desk):
    poisoned = example_desk("langgraph_desk", "lg-poisoned")
    clean = example_desk("langgraph_desk", "lg-clean", poisoned=False)
    assert (poisoned.actions, clean.actions) == (9, 7)
    before = export_state(workspace="lg-poisoned")
    assert before != export_state(workspace="lg-clean")
    assert {"ticket": "t02", "choice": "refund", "level": "full"} in before["decisions"]  # the note's doing
    performed = list(poisoned.performed)
    assert ("t02", "refund", 9000) in performed

    # A replay its registration's secret did not sign is refused before the agent runs.
    forged = json.dumps({"agent": "lg_triage", "action": 1, "payload": {}, "base_url": "http://127.0.0.1:9",
                         "token": "t", "purpose": "repair", "replay_id": "forged-1"}).encode()
    ts, signature = sign(forged, poisoned.secrets["lg_triage"] + "x")
    assert poisoned.post_replay(forged, {"X-Kintsugi-Timestamp": str(ts), "X-Kintsugi-Signature": signature}) == 401
    assert poisoned.post_replay(forged, {}) == 401

    incident = run_repair(incident_id=open_incident("lg-poisoned", poisoned.scenario.POISONED).pk)
    v = incident.verification
    assert incident.status == "repaired" and (v["facts"], v["decisions"], v["effects"]) == (0, 0, 0)
    assert export_state(workspace="lg-poisoned") == export_state(workspace="lg-clean")
    # The store's items are kintsugi memory under "<namespace>/<key>".
    assert [f["key"] for f in export_state(workspace="lg-clean")["facts"]] == [
        "policy/change-of-mind", "policy/damaged", "policy/unopened"]
    assert incident.counts == {"poisoned": 1, "rerun_changed": 1, "rerun_same": 3, "skipped": 2, "superseded": 1,
                               "new": 0}
    assert poisoned.performed == performed  # re-runs and the baseline replayed here; nothing performed again


def test_store_keys_map_to_memory_keys_and_a_slash_in_a_part_is_refused():
    assert memory_key(("policy", "acme"), "refunds") == "policy/acme/refunds"
    for namespace, key in ((("poli/cy",), "refunds"), (("policy",), "a/b"), (("",), "refunds"), (("policy",), "")):
        with pytest.raises(ValueError, match="free of '/'"):
            memory_key(namespace, key)


def test_the_store_outside_a_recorded_action_says_so_and_reads_nothing():
    with pytest.raises(RuntimeError, match="no kintsugi action is running"):
        KintsugiStore().get(("policy",), "refunds")
