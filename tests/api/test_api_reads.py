"""The read endpoints: the blast-radius preview (paged, capped), explain paths and fact history."""
from datetime import datetime, timedelta, timezone

import pytest

from provenance.graph.graph import workspace_graph
from tests.helpers import client_for
from tests.api.test_api_access import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_and_lead(make_user, record_desk):
    ws, source = record_desk("api-reads")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    return ws, source, client_for(lead)


def test_blast_radius_preview_of_the_poisoned_page_is_the_articles(desk_and_lead):
    ws, source, client = desk_and_lead
    body = client.get(f"/api/v1/sources/{source.pk}/blast-radius/").json()
    assert body["size"] == 25
    assert body["tickets"] == 8
    assert body["amount_at_stake"] == 750
    assert body["effects_by_kind"] == {"email": 8, "refund": 8}
    assert len(body["actions"]) == 25 and body["next"] is None
    seqs = [a["seq"] for a in body["actions"]]
    assert seqs == sorted(seqs)


def test_blast_radius_pages_cover_the_radius_once(desk_and_lead):
    ws, source, client = desk_and_lead
    url, seen = f"/api/v1/sources/{source.pk}/blast-radius/?limit=10", []
    while url:
        page = client.get(url).json()
        assert page["size"] == 25
        seen += [a["id"] for a in page["actions"]]
        url = page["next"]
    assert len(seen) == len(set(seen)) == 25
    whole = client.get(f"/api/v1/sources/{source.pk}/blast-radius/?limit=500").json()
    assert seen == [a["id"] for a in whole["actions"]]


def test_blast_radius_over_the_hard_cap_is_a_clear_400(desk_and_lead):
    ws, source, client = desk_and_lead
    error = assert_error(client.get(f"/api/v1/sources/{source.pk}/blast-radius/?limit=501"), 400, "limit_over_cap")
    assert error["details"] == {"limit": 501, "max_limit": 500}
    assert "500" in error["message"]
    assert_error(client.get(f"/api/v1/sources/{source.pk}/blast-radius/?limit=0"), 400, "invalid")
    assert_error(client.get(f"/api/v1/sources/{source.pk}/blast-radius/?offset=x"), 400, "invalid")


def _vip_refund_notifier(ws) -> int:
    """A notifier step downstream of the poisoned VIP rule: triage -> refund -> notifier on one ticket."""
    rows = workspace_graph(ws.name).ro_query(
        "MATCH (t:Action {agent: 'triage'})-[:HANDED_OFF]->(r:Action {agent: 'refund'})"
        "-[:HANDED_OFF]->(n:Action {agent: 'notifier'}) WHERE 'vip_rules' IN t.read_keys "
        "RETURN n.id ORDER BY n.seq LIMIT 1")
    return rows[0][0]


def test_explain_path_runs_from_the_ingesting_action_to_the_action(desk_and_lead):
    ws, source, client = desk_and_lead
    notifier = _vip_refund_notifier(ws)
    body = client.get(f"/api/v1/actions/{notifier}/explain/?source={source.pk}").json()
    steps = body["steps"]
    assert [s["agent"] for s in steps] == ["research", "triage", "refund", "notifier"]
    assert steps[0]["reached_by"] == {"edge": "INGESTED", "source": source.source_id, "from_action": None,
                                      "facts": []}
    assert steps[1]["reached_by"]["edge"] == "FEEDS"
    assert steps[1]["reached_by"]["from_action"] == steps[0]["action"]
    assert "vip_rules" in steps[1]["reached_by"]["facts"]
    assert any(f["key"] == "vip_rules" and f["writer"] == steps[0]["action"] for f in steps[1]["facts_read"])
    assert [s["reached_by"]["edge"] for s in steps[2:]] == ["HANDED_OFF", "HANDED_OFF"]
    assert steps[2]["action"] in steps[1]["handoffs"] and steps[3]["action"] == notifier


def test_explain_answers_404_when_the_action_does_not_depend_on_the_source(desk_and_lead):
    ws, source, client = desk_and_lead
    radius = {a["id"] for a in client.get(f"/api/v1/sources/{source.pk}/blast-radius/?limit=500").json()["actions"]}
    outside = min(set(range(1, 67)) - radius)
    assert_error(client.get(f"/api/v1/actions/{outside}/explain/?source={source.pk}"), 404, "no_path")
    assert_error(client.get(f"/api/v1/actions/99999/explain/?source={source.pk}"), 404, "not_found")
    assert_error(client.get("/api/v1/actions/1/explain/"), 400, "invalid")


def test_fact_history_carries_the_three_clocks_and_answers_as_of(desk_and_lead):
    ws, source, client = desk_and_lead
    body = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/").json()
    assert body["key"] == "vip_rules" and body["as_of"] is None and body["value_as_of"] is None
    assert len(body["versions"]) >= 2
    for v in body["versions"]:
        assert v["known_at"] and v["system_at"] and v["writer_agent"] == "research"
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    now = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of": later, "clock": "known"}).json()
    assert now["value_as_of"]["id"] == body["versions"][-1]["id"]
    before = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of": "2000-01-01T00:00:00Z"}).json()
    assert before["value_as_of"] is None
    # The desk never states when a rule held in the world: valid time stays unknown, never guessed.
    valid = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of": later, "clock": "valid"}).json()
    assert valid["value_as_of"] is None


def test_fact_history_errors(desk_and_lead):
    ws, source, client = desk_and_lead
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/no_such_key/"), 404, "not_found")
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/?clock=wall"), 400, "invalid")
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/?as_of=yesterday"), 400, "invalid")


def test_the_expensive_endpoints_are_throttled(desk_and_lead, settings):
    ws, source, client = desk_and_lead
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "blast_radius": "2/min"}}
    url = f"/api/v1/sources/{source.pk}/blast-radius/?limit=1"
    assert [client.get(url).status_code for _ in range(2)] == [200, 200]
    error = assert_error(client.get(url), 429, "throttled")
    assert error["details"]["retry_after"] > 0
    assert client.get(f"/api/v1/sources/{source.pk}/").status_code == 200  # cheap reads are not throttled


def test_explain_of_a_rerun_action_after_the_repair_still_gives_its_path(desk_and_lead, settings):
    """After the repair the live graph no longer ties the re-run to the page; the answer comes from the
    repair's own record, over the API as over MCP."""
    from kintsugi_site.mcp_server import explain_path as mcp_explain
    from repairs.services import flag_source
    from repairs.job import run_repair

    ws, source, client = desk_and_lead
    radius = client.get(f"/api/v1/sources/{source.pk}/blast-radius/?limit=500").json()["actions"]
    triage = next(a["id"] for a in radius if a["agent"] == "triage" and a["ticket"] == "t05")
    lead = ws.members.get()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    run_repair(incident_id=flag_source(workspace=ws, source_id=source.source_id, actor=lead, reason="poisoned",
                                       via="cli").pk)
    response = client.get(f"/api/v1/actions/{triage}/explain/?source={source.pk}")
    assert response.status_code == 200, response.content
    assert [s["agent"] for s in response.json()["steps"]] == ["research", "triage"]
    mcp = mcp_explain(user=lead, workspace=ws.name, source=source.source_id, action_id=triage)
    assert [(s["agent"], s["reached_by"]["edge"]) for s in mcp["steps"]] == [("research", "INGESTED"), ("triage", "FEEDS")]
