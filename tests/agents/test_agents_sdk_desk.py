"""The Agents SDK example desk recorded over HTTP, its poisoned note flagged, its agents re-run through
its replay endpoint: the repaired workspace is what the same desk records without the note."""
import pytest

from tests.helpers import repair_example_desk

pytestmark = pytest.mark.django_db(transaction=True)


def test_agents_sdk_desk_repaired_through_its_replay_endpoint_equals_its_clean_recording_and_refuses_forged_replays(
        example_desk):
    incident = repair_example_desk(example_desk, "agents_sdk_desk", "sdk")
    assert incident.counts == {"poisoned": 1, "rerun_changed": 1, "rerun_same": 0, "skipped": 0, "superseded": 1,
                               "new": 0}
