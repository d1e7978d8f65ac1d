"""Who may see and do what: anonymous 401, other workspace 404, wrong role 403; errors are JSON."""
import re

import pytest

from compensation.models import AuditEvent
from repairs.models import Incident
from tests.helpers import api_key, client_for

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert "Traceback" not in response.content.decode()
    if code:
        assert error["code"] == code
    return error


def test_schema_is_public_openapi():
    response = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_anonymous_is_refused_with_401_and_json():
    response = client_for().get("/api/v1/incidents/")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Token")


def test_a_bad_token_is_refused_with_401():
    client = client_for()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert_error(client.get("/api/v1/workspaces/"), 401, "authentication_failed")


def test_a_user_sees_only_the_workspaces_they_are_a_member_of(make_user, record_desk):
    ours, _ = record_desk("api-acc-ours")
    theirs, their_source = record_desk("api-acc-theirs")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ours])
    client = client_for(lead)
    assert [w["name"] for w in client.get("/api/v1/workspaces/").json()["results"]] == ["api-acc-ours"]
    assert_error(client.get(f"/api/v1/workspaces/{theirs.pk}/"), 404, "not_found")
    assert {s["workspace"] for s in client.get("/api/v1/sources/").json()["results"]} == {ours.pk}
    assert_error(client.get(f"/api/v1/sources/{their_source.pk}/blast-radius/"), 404)
    assert_error(client.post(f"/api/v1/sources/{their_source.pk}/flag/", {"reason": "x"}, format="json"), 404)
    assert not Incident.objects.exists()


def test_a_superuser_sees_every_workspace(make_user, record_desk):
    record_desk("api-acc-a")
    admin = make_user("root", superuser=True)
    assert client_for(admin).get("/api/v1/workspaces/").json()["count"] == 1


def test_workspace_detail_has_counts(make_user, record_desk):
    ws, _ = record_desk("api-acc-counts")
    user = make_user("auditor", roles=["Auditor"], workspaces=[ws])
    body = client_for(user).get(f"/api/v1/workspaces/{ws.pk}/").json()
    assert body["counts"]["sources"] == 3
    assert body["counts"]["tickets"] == 24
    assert body["counts"]["actions"] == 66
    assert body["counts"]["incidents"]["total"] == 0


def test_refused_flags_change_nothing_and_leave_an_audit_record(make_user, record_desk):
    ws, source = record_desk("api-acc-role")
    theirs, their_source = record_desk("api-acc-role-theirs")
    auditor = make_user("auditor", roles=["Auditor"], workspaces=[ws])
    url = f"/api/v1/sources/{source.pk}/flag/"
    assert_error(client_for(auditor).post(url, {"reason": "bad page"}, format="json"), 403, "permission_denied")
    assert_error(client_for().post(url, {"reason": "bad page"}, format="json"), 401, "not_authenticated")
    assert_error(client_for(auditor).post(f"/api/v1/sources/{their_source.pk}/flag/", {"reason": "x"},
                                          format="json"), 404, "not_found")
    assert not Incident.objects.exists()
    refusals = list(AuditEvent.objects.filter(action="refused").order_by("seq"))
    assert [(e.actor_name, e.data["status"], e.data["code"]) for e in refusals] == [
        ("auditor", 403, "permission_denied"), ("", 401, "not_authenticated"), ("auditor", 404, "not_found")]
    assert refusals[0].via == "api" and refusals[0].subject_type == "source"
    assert refusals[0].data["attempted"] == f"POST {url}" and "may not flag" in refusals[0].reason


def test_reading_needs_a_role_that_may_read_it(make_user, record_desk):
    ws, source = record_desk("api-acc-noread")
    member = make_user("member", workspaces=[ws])  # a member without any role
    assert client_for(member).get("/api/v1/workspaces/").json()["count"] == 1
    assert_error(client_for(member).get("/api/v1/incidents/"), 403, "permission_denied")
    assert_error(client_for(member).get(f"/api/v1/sources/{source.pk}/blast-radius/"), 403, "permission_denied")
    assert_error(client_for(member).get("/api/v1/review-items/"), 403, "permission_denied")
    assert not AuditEvent.objects.filter(action="refused").exists()  # reads change nothing: no record


def test_the_token_may_also_be_sent_as_bearer(make_user, record_desk):
    ws, _ = record_desk("api-acc-bearer")
    user = make_user("lead", roles=["Support lead"], workspaces=[ws])
    client = client_for()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(user)}")
    assert client.get("/api/v1/incidents/").status_code == 200


def test_flagging_needs_a_reason(make_user, record_desk):
    ws, source = record_desk("api-acc-reason")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    error = assert_error(client_for(lead).post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "  "}, format="json"),
                         400, "invalid")
    assert "reason" in error["details"]
    assert_error(client_for(lead).post(f"/api/v1/sources/{source.pk}/flag/", {}, format="json"), 400, "invalid")
    assert not Incident.objects.exists()


def test_flagging_twice_is_409_naming_the_open_incident(make_user, record_desk, django_capture_on_commit_callbacks):
    ws, source = record_desk("api-acc-twice")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    client = client_for(lead)
    first = client.post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "poisoned VIP rule"}, format="json")
    assert first.status_code == 201, first.content
    incident = first.json()
    assert incident["status"] == "open" and incident["source"] == source.source_id
    assert first["Location"].endswith(f"/api/v1/incidents/{incident['id']}/")
    assert Incident.objects.get(pk=incident["id"]).flagged_via == "api"
    error = assert_error(client.post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "again"}, format="json"),
                         409, "incident_already_open")
    assert error["details"]["incident"] == incident["id"]
    assert str(incident["id"]) in error["message"]


def test_retry_needs_the_lead_role(make_user, record_desk):
    ws, source = record_desk("api-acc-retry")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    reviewer = make_user("reviewer", roles=["Reviewer"], workspaces=[ws])
    incident = Incident.objects.create(workspace=ws, run_number=ws.run_number, source_id=source.source_id,
                                       reason="r", flagged_by=lead, flagged_via="api", status="failed")
    assert_error(client_for(reviewer).post(f"/api/v1/incidents/{incident.pk}/retry/", {"reason": "again"},
                                           format="json"), 403, "permission_denied")
    incident.refresh_from_db()
    assert incident.status == "failed"


def test_retry_of_a_repaired_incident_is_409(make_user, record_desk):
    ws, source = record_desk("api-acc-retry409")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    incident = Incident.objects.create(workspace=ws, run_number=ws.run_number, source_id=source.source_id,
                                       reason="r", flagged_by=lead, flagged_via="api", status="repaired")
    assert_error(client_for(lead).post(f"/api/v1/incidents/{incident.pk}/retry/", {"reason": "again"}, format="json"),
                 409, "refused_transition")


def test_an_unknown_api_path_is_a_json_404(make_user):
    assert_error(client_for().get("/api/v1/no-such-thing/"), 404, "not_found")


def test_an_unexpected_failure_is_a_json_500_without_a_trace(make_user, record_desk, monkeypatch):
    ws, source = record_desk("api-acc-500")
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])

    def broken(**kwargs):
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr("provenance.recording.selectors.blast_radius", broken)
    client = client_for(lead)
    client.raise_request_exception = False
    error = assert_error(client.get(f"/api/v1/sources/{source.pk}/blast-radius/"), 500, "server_error")
    assert "secret" not in error["message"]


def test_docs_and_the_browsable_api_render(make_user, record_desk, client):
    ws, _ = record_desk("api-acc-docs")
    user = make_user("lead", roles=["Support lead"], workspaces=[ws])
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
    assert b"/static/drf_spectacular_sidecar/" in docs.content  # served locally, no CDN
    script = re.search(rb'src="(/static/drf_spectacular_sidecar/[^"]+)"', docs.content).group(1).decode()
    assert client.get(script).status_code == 200
    assert client.get("/static/drf_spectacular_sidecar/no-such-file.js").status_code == 404
    client.force_login(user)
    page = client.get("/api/v1/workspaces/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and b"api-acc-docs" in page.content
