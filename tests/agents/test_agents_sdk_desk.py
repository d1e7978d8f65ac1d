"""The Agents SDK example desk recorded over HTTP, its poisoned note flagged, its agents re-run through
its replay endpoint: the repaired workspace is what the same desk records without the note."""
import json

import pytest

from kintsugi_client.signing import sign
from provenance.selectors import export_state
from repairs.job import run_repair
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)


def test_agents_sdk_desk_repaired_through_its_replay_endpoint_equals_its_clean_recording_and_refuses_forged_replays(
        example_desk):
    poisoned = example_desk("agents_sdk_desk", "sdk-poisoned")
    clean = example_desk("agents_sdk_desk", "sdk-clean", poisoned=False)
    assert (poisoned.actions, clean.actions) == (9, 7)
    before = export_state(workspace="sdk-poisoned")
    assert before != export_state(workspace="sdk-clean")
    assert {"ticket": "t02", "choice": "refund", "level": "full"} in before["decisions"]  # the note's doing
    performed = list(poisoned.performed)
    assert ("t02", "refund", 9000) in performed

    # A replay its registration's secret did not sign is refused before the agent runs.
    forged = json.dumps({"agent": "sdk_triage", "action": 1, "payload": {}, "base_url": "http://127.0.0.1:9",
                         "token": "t", "purpose": "repair", "replay_id": "forged-1"}).encode()
    ts, signature = sign(forged, poisoned.secrets["sdk_triage"] + "x")
    assert poisoned.post_replay(forged, {"X-Kintsugi-Timestamp": str(ts), "X-Kintsugi-Signature": signature}) == 401
    assert poisoned.post_replay(forged, {}) == 401

    incident = run_repair(incident_id=open_incident("sdk-poisoned", poisoned.scenario.POISONED).pk)
    v = incident.verification
    assert incident.status == "repaired" and (v["facts"], v["decisions"], v["effects"]) == (0, 0, 0)
    assert export_state(workspace="sdk-poisoned") == export_state(workspace="sdk-clean")
    assert incident.counts == {"poisoned": 1, "rerun_changed": 1, "rerun_same": 0, "skipped": 0, "superseded": 1,
                               "new": 0}
    assert poisoned.performed == performed  # re-runs and the baseline replayed here; nothing performed again
