"""A workspace set up over the API end to end: its lead added as a member (Workspace admin only, audited),
its state read as export_state prints it, and a source whose content is empty."""
import json

import pytest
from django.core.management import call_command

from compensation.models import AuditEvent
from core.vocabulary import AuditAction
from provenance.agents import agent
from provenance.models import Source
from provenance.recording.services import record_root
from tests.api.test_api_access import assert_error
from tests.helpers import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(make_user):
    """A Workspace admin who created a workspace over the API, a Support lead they may pick (a member of
    another workspace they administer) and one they may not (nobody made them visible)."""
    admin = make_user("wsadmin", roles=["Workspace admin"])
    other = client_for(admin).post("/api/v1/workspaces/", {"name": "older", "reason": "first desk"}, format="json")
    lead = make_user("lead", roles=["Support lead"])
    from provenance.models import Workspace

    Workspace.objects.get(pk=other.json()["id"]).members.add(lead)
    created = client_for(admin).post("/api/v1/workspaces/", {"name": "fresh", "reason": "a new desk"}, format="json")
    assert created.status_code == 201
    stranger = make_user("stranger", roles=["Support lead"])
    return admin, lead, stranger, created.json()["id"]


def test_a_workspace_admin_adds_and_removes_its_lead_with_a_role_and_a_reason(team):
    admin, lead, _, ws = team
    client = client_for(admin)
    added = client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead", "role": "Support lead",
                                                              "reason": "our lead"}, format="json")
    assert added.status_code == 201, added.content
    assert {"username": "lead", "roles": ["Support lead"]} in added.json()["members"] and added.json()["changed"]
    again = client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead", "reason": "again"}, format="json")
    assert again.status_code == 200 and again.json()["changed"] is False
    assert client_for(lead).get(f"/api/v1/workspaces/{ws}/").status_code == 200  # the lead now sees it
    event = AuditEvent.objects.filter(action=AuditAction.MEMBERSHIP_ADDED, subject_id=str(ws)).latest("pk")
    assert event.reason == "our lead" and event.actor_id == admin.pk and event.data["user"] == "lead"
    listed = client.get(f"/api/v1/workspaces/{ws}/members/").json()["members"]
    assert [m["username"] for m in listed] == ["lead", "wsadmin"]
    gone = client.delete(f"/api/v1/workspaces/{ws}/members/lead/", {"reason": "moved team"}, format="json")
    assert gone.status_code == 200 and gone.json()["changed"] and "lead" not in str(gone.json()["members"])
    assert AuditEvent.objects.filter(action=AuditAction.MEMBERSHIP_REMOVED, reason="moved team").exists()
    assert client_for(lead).get(f"/api/v1/workspaces/{ws}/").status_code == 404


def test_membership_refusals(team, make_user):
    admin, lead, stranger, ws = team
    client = client_for(admin)
    # A role the user does not hold: refused, nothing changed.
    assert_error(client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead", "role": "Reviewer",
                                                                   "reason": "x"}, format="json"), 400, "role_not_held")
    # Someone outside the admin's picker is unknown, as in the admin's own picker.
    assert_error(client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "stranger", "reason": "x"},
                             format="json"), 404, "not_found")
    assert_error(client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead"}, format="json"), 400, "invalid")
    # A member without the Workspace admin role may not manage members; another workspace is a 404.
    client.post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead", "reason": "ours"}, format="json")
    assert_error(client_for(lead).post(f"/api/v1/workspaces/{ws}/members/", {"username": "wsadmin", "reason": "x"},
                                       format="json"), 403, "permission_denied")
    assert_error(client_for(lead).get(f"/api/v1/workspaces/{ws}/members/"), 403, "permission_denied")
    outsider = make_user("outsider-admin", roles=["Workspace admin"])
    assert_error(client_for(outsider).post(f"/api/v1/workspaces/{ws}/members/", {"username": "lead", "reason": "x"},
                                           format="json"), 404)
    assert_error(client_for(outsider).delete(f"/api/v1/workspaces/{ws}/members/lead/?reason=x"), 404)
    assert [m["username"] for m in client.get(f"/api/v1/workspaces/{ws}/members/").json()["members"]] == [
        "lead", "wsadmin"]


def test_state_is_what_export_state_prints(make_user, record_desk, capsys):
    ws, _ = record_desk("state-api")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    body = client_for(lead).get(f"/api/v1/workspaces/{ws.pk}/state/").json()
    call_command("export_state", "--workspace", ws.name, "--json")
    assert body == {"workspace": ws.name} | json.loads(capsys.readouterr().out)
    assert len(body["decisions"]) == 24 and body["facts"]
    assert_error(client_for(make_user("other", roles=["Support lead"])).get(f"/api/v1/workspaces/{ws.pk}/state/"), 404)
    reviewer_only = make_user("ops", roles=["Workspace admin"], workspaces=[ws])
    assert client_for(reviewer_only).get(f"/api/v1/workspaces/{ws.pk}/state/").status_code == 200


@agent("empty_page_reader")
def empty_page_reader(rec, payload: dict) -> dict:
    content = rec.ingest(payload["source"])
    rec.set("notes/empty-page", content)
    return {"empty": content == ""}


def test_a_source_whose_content_is_empty_is_created_and_read(team):
    admin, _, _, ws = team
    response = client_for(admin).post(f"/api/v1/workspaces/{ws}/sources/", {
        "source_id": "blank-page", "content": "", "reason": "a page that says nothing"}, format="json")
    # The red case: the API answered 400 "This field may not be blank." here.
    assert response.status_code == 201, response.content
    source = Source.objects.get(workspace_id=ws, source_id="blank-page")
    assert source.content == ""
    from provenance.graph.graph import workspace_graph

    record_root(workspace=source.workspace.name, agent="empty_page_reader", payload={"source": "blank-page"})
    decision = workspace_graph(source.workspace.name).ro_query(
        "MATCH (a:Action)-[:INGESTED]->(:Source {id: 'blank-page'}) RETURN a.decision")
    assert [json.loads(r[0]) for r in decision] == [{"empty": True}]
    # A missing content is still refused when creating: empty is a content, absent is not.
    assert_error(client_for(admin).post(f"/api/v1/workspaces/{ws}/sources/", {
        "source_id": "no-page", "reason": "x"}, format="json"), 400, "invalid")


def test_the_admin_adds_a_source_whose_content_is_empty(admin_client):
    from provenance.models import Workspace

    ws = Workspace.objects.create(name="blank-admin")
    response = admin_client.post("/admin/provenance/source/add/", {
        "workspace": ws.pk, "source_id": "blank-page", "title": "", "content": ""})
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    assert Source.objects.get(workspace=ws, source_id="blank-page").content == ""
