"""What the system believed when: an action's reads as memory stood when it ran beside now, a fact's
versions on the three clocks, and a back-filled policy on the right clocks."""
from datetime import datetime, timedelta, timezone

import pytest

from provenance.agents import agent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import Workspace
from provenance.recording.selectors import fact_history, version_as_of
from provenance.recording.services import desk_run, record_root
from provenance.recording.time_travel import UnknownAction, action_page, fact_page, ran_at
from tests.helpers import repair

pytestmark = pytest.mark.django_db(transaction=True)


@agent("backfill_policy")
def backfill_policy(rec, payload: dict) -> dict:
    """Test agent: back-fills an old policy, saying when it was valid and when it was learned."""
    rec.set("shipping_policy", payload["text"], valid_from=payload["valid_from"], observed_at=payload["observed_at"])
    return {"backfilled": True}


def _triage_of(workspace: str, ticket: str) -> int:
    return workspace_graph(workspace).ro_query("MATCH (a:Action {agent: 'triage', ticket: $t}) RETURN a.id",
                                               {"t": ticket})[0][0]


def test_t05_triage_read_the_poisoned_vip_rules_and_v1_is_believed_now():
    desk_run(workspace="tt")
    incident = repair("tt", POISONED_PAGE)
    page = action_page(workspace=Workspace.objects.get(name="tt"), action_id=_triage_of("tt", "t05"))
    assert page["status"] == "rerun_changed" and page["ran_at"]
    assert page["decision_before_repair"] == {"choice": "refund", "level": "full"}
    vip = next(f for f in page["facts"] if f["key"] == "vip_rules")
    seen = vip["seen"]
    assert seen["version"] == 2 and seen["sources"] == [POISONED_PAGE]
    assert seen["invalidated_by"] == incident.pk and seen["invalidated_at"]
    assert "no checks" in seen["value"]
    assert vip["then"]["known"]["version"] == 2 and vip["then"]["system"]["version"] == 2
    assert vip["now"]["known"]["version"] == 1 and vip["now"]["system"]["version"] == 1
    assert vip["read_now"]["version"] == 1  # the re-run read the good version
    assert vip["then"]["valid"] is None  # the desk's agents never say when a policy was valid


def test_a_fact_page_shows_every_version_with_its_writer_source_and_invalidation():
    desk_run(workspace="tf")
    incident = repair("tf", POISONED_PAGE)
    page = fact_page(workspace=Workspace.objects.get(name="tf"), key="vip_rules")
    v1, v2 = page["versions"]
    assert (v1["sources"], v1["writer_agent"], v1["active"], v1["invalidated_by"]) == (
        ["acme/vip-program"], "research", True, None)
    assert (v2["sources"], v2["active"], v2["invalidated_by"]) == ([POISONED_PAGE], False, incident.pk)
    assert all(v["system_at"] and v["known_at"] and v["trust"] == "unknown" for v in page["versions"])
    assert page["now"]["known"]["version"] == 1


def test_a_backfilled_policy_is_believed_only_after_it_was_learned_and_valid_on_its_own_clock():
    desk_run(workspace="tb")
    before_write = datetime.now(timezone.utc)
    record_root(workspace="tb", agent="backfill_policy",
                payload={"text": "Parcels ship within 5 days.", "valid_from": "2019-03-01T00:00:00+00:00",
                         "observed_at": "2021-06-01T00:00:00+00:00"})
    after_write = datetime.now(timezone.utc) + timedelta(seconds=1)
    versions = fact_history(workspace="tb", key="shipping_policy")
    assert len(versions) == 1
    # Before the system stored it, it believed nothing about shipping, whatever the back-filled clocks say.
    assert version_as_of(versions, at=before_write, clock="known") is None
    assert version_as_of(versions, at=before_write, clock="system") is None
    assert version_as_of(versions, at=after_write, clock="known")["value"] == "Parcels ship within 5 days."
    # In the world it was valid long before: from its valid_from on, not before.
    assert version_as_of(versions, at=datetime(2020, 1, 1, tzinfo=timezone.utc), clock="valid") is not None
    assert version_as_of(versions, at=datetime(2019, 1, 1, tzinfo=timezone.utc), clock="valid") is None
    assert versions[0]["known_at"].startswith("2021-06-01")


def test_as_of_an_action_is_when_it_ran_and_an_unknown_action_is_refused():
    desk_run(workspace="ta")
    ws = Workspace.objects.get(name="ta")
    at = ran_at(workspace=ws, action_id=_triage_of("ta", "t05"))
    assert datetime.now(timezone.utc) - timedelta(minutes=5) < at <= datetime.now(timezone.utc)
    with pytest.raises(UnknownAction):
        ran_at(workspace=ws, action_id=99999)
    with pytest.raises(UnknownAction):
        action_page(workspace=ws, action_id=99999)
