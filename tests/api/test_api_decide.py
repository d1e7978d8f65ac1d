"""Deciding before flagging over the API: a source's what-if, sources worth a look, an action's reads when
it ran, and fact history as of an action; each scoped to the caller's workspaces and in the schema."""
from datetime import datetime, timedelta, timezone

import pytest

from compensation.models import AuditEvent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from repairs.models import Incident
from tests.helpers import client_for, repair
from tests.api.test_api_access import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk(make_user, record_desk):
    ws, source = record_desk("api-decide")
    lead = make_user("decide-lead", roles=["Support lead"], workspaces=[ws])
    return ws, source, lead


def _t05(ws) -> int:
    return workspace_graph(ws.name).ro_query("MATCH (a:Action {agent: 'triage', ticket: 't05'}) RETURN a.id")[0][0]


def test_what_if_endpoint_gives_the_exact_outcome_and_writes_nothing(desk):
    ws, source, lead = desk
    body = client_for(lead).get(f"/api/v1/sources/{source.pk}/what-if/").json()
    assert body["blast_radius"] == 25 and body["effects_invalidated"] == 10 and body["compensations"] == 10
    assert body["counts"] == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8,
                              "new": 4}
    assert body["amount_reversed"] == {"USD": 40000}
    assert [t["ticket"] for t in body["tickets_changed"]] == ["t04", "t05", "t06", "t07", "t08"]
    assert len(body["items"]) == 10 and body["fingerprint"]
    assert not Incident.objects.exists()
    assert AuditEvent.objects.filter(action="what_if.viewed", via="api", actor=lead).count() == 1


def test_what_if_endpoint_keeps_to_roles_and_tenancy(desk, make_user, record_desk):
    ws, source, lead = desk
    auditor = make_user("decide-auditor", roles=["Auditor"], workspaces=[ws])
    assert_error(client_for(auditor).get(f"/api/v1/sources/{source.pk}/what-if/"), 403, "permission_denied")
    _, other = record_desk("api-decide-b")
    assert_error(client_for(lead).get(f"/api/v1/sources/{other.pk}/what-if/"), 404, "not_found")
    assert_error(client_for(lead).get("/api/v1/sources/999999/what-if/"), 404, "not_found")
    assert not AuditEvent.objects.filter(action="what_if.viewed").exists()


def test_suspicious_sources_endpoint_ranks_the_poisoned_page_first(desk, record_desk):
    ws, source, lead = desk
    body = client_for(lead).get(f"/api/v1/workspaces/{ws.pk}/suspicious-sources/").json()
    assert body["workspace"] == ws.name
    first = body["sources"][0]
    assert first["source"] == POISONED_PAGE and first["reasons"] and first["score"] > body["sources"][1]["score"]
    other, _ = record_desk("api-decide-c")
    assert_error(client_for(lead).get(f"/api/v1/workspaces/{other.pk}/suspicious-sources/"), 404, "not_found")


def test_an_action_endpoint_and_fact_history_as_of_the_action(desk):
    ws, source, lead = desk
    incident = repair(ws.name, POISONED_PAGE)
    client, t05 = client_for(lead), _t05(ws)
    page = client.get(f"/api/v1/workspaces/{ws.pk}/actions/{t05}/").json()
    vip = next(f for f in page["facts"] if f["key"] == "vip_rules")
    assert vip["seen"]["version"] == 2 and vip["seen"]["invalidated_by"] == incident.pk
    assert vip["now"]["known"]["version"] == 1 and page["ran_at"]
    then = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of_action": t05}).json()
    assert then["as_of_action"] == t05 and then["value_as_of"]["version"] == 2
    assert then["value_as_of"]["sources"] == [POISONED_PAGE] and then["value_as_of"]["trust"] == "unknown"
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    now = client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of": later}).json()
    assert now["value_as_of"]["version"] == 1
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/actions/999999/"), 404, "not_found")
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of_action": 999999}), 404, "not_found")
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of_action": "x"}), 400, "invalid")
    assert_error(client.get(f"/api/v1/workspaces/{ws.pk}/facts/vip_rules/", {"as_of_action": t05, "as_of": later}),
                 400, "invalid")


def test_the_new_endpoints_are_in_the_schema(client):
    paths = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    for path in ("/api/v1/sources/{id}/what-if/", "/api/v1/workspaces/{id}/suspicious-sources/",
                 "/api/v1/workspaces/{id}/actions/{action_id}/"):
        assert path in paths, sorted(paths)
    params = {p["name"] for p in paths["/api/v1/workspaces/{id}/facts/{key}/"]["get"]["parameters"]}
    assert "as_of_action" in params
