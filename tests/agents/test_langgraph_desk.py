"""The LangGraph example desk recorded over HTTP, its poisoned note flagged, its nodes re-run through
its replay endpoint: the repaired workspace is what the same desk records without the note."""
import pytest

from provenance.recording.selectors import export_state
from tests.helpers import repair_example_desk


@pytest.mark.django_db(transaction=True)
def test_langgraph_desk_repaired_through_its_replay_endpoint_equals_its_clean_recording_and_refuses_forged_replays(
        example_desk):
    incident = repair_example_desk(example_desk, "langgraph_desk", "lg")
    # The store's items are kintsugi memory under "<namespace>/<key>".
    assert [f["key"] for f in export_state(workspace="lg-clean")["facts"]] == [
        "policy/change-of-mind", "policy/damaged", "policy/unopened"]
    assert incident.counts == {"poisoned": 1, "rerun_changed": 1, "rerun_same": 3, "skipped": 2, "superseded": 1,
                               "new": 0}


# The client's LangGraph module is imported in the tests that use it: LangGraph costs every test process
# that collects this file a second.
def test_store_keys_map_to_memory_keys_and_a_slash_in_a_part_is_refused():
    from kintsugi_client.langgraph import memory_key

    assert memory_key(("policy", "acme"), "refunds") == "policy/acme/refunds"
    for namespace, key in ((("poli/cy",), "refunds"), (("policy",), "a/b"), (("",), "refunds"), (("policy",), "")):
        with pytest.raises(ValueError, match="free of '/'"):
            memory_key(namespace, key)


def test_the_store_outside_a_recorded_action_says_so_and_reads_nothing():
    from kintsugi_client.langgraph import KintsugiStore

    with pytest.raises(RuntimeError, match="no kintsugi action is running"):
        KintsugiStore().get(("policy",), "refunds")
