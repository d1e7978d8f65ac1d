"""The REST API's edge: NUL bytes and over-long values in filters and paths are 400s in the API's error
shape (never a 500), and approve applies `edits` as the admin's edit-then-approve does."""
import pytest

from compensation.models import AuditEvent, CompensationItem
from tests.helpers import client_for, row_counts

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind


@pytest.fixture
def api(repaired):
    from rest_framework.authtoken.models import Token

    ws = repaired.incident.workspace
    for user in (repaired.people.lead, repaired.people.reviewer):
        ws.members.add(user)
        Token.objects.get_or_create(user=user)
    return repaired


@pytest.mark.parametrize("path", [
    "/api/v1/review-items/?ticket=%00", "/api/v1/review-items/?ticket=" + "t" * 40, "/api/v1/review-items/?kind=",
    "/api/v1/review-items/?workspace=%00", "/api/v1/sources/?workspace=%00", "/api/v1/sources/?workspace=",
    "/api/v1/incidents/?source=%00", "/api/v1/incidents/?source=", "/api/v1/actions/1/explain/?source=%00",
    "/api/v1/incidents/{incident}/report/?format=",
])
def test_bad_filters_are_400_in_the_error_shape(api, path):
    client = client_for(api.people.lead)
    before = row_counts()
    response = client.get(path.format(incident=api.incident.pk))
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] in ("invalid", "parse_error")
    assert row_counts() == before


def test_a_nul_in_a_fact_key_is_400(api):
    client = client_for(api.people.lead)
    response = client.get(f"/api/v1/workspaces/{api.incident.workspace_id}/facts/vip%00rules/")
    assert response.status_code == 400 and "control character" in response.json()["error"]["message"]


def _pending(incident, kind, ticket=None):
    qs = incident.compensation_items.filter(kind=kind, status="pending", valid=True)
    return (qs.filter(ticket_id=ticket) if ticket else qs).order_by("pk").first()


def test_approve_applies_the_edits_it_is_sent(api):
    item = _pending(api.incident, K.REFUND_REVERSAL)
    lower = item.amount_cents - 100
    response = client_for(api.people.reviewer).post(
        f"/api/v1/review-items/{item.pk}/approve/",
        {"reason": "customer agreed to a smaller reversal", "edits": {"amount_cents": lower}}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["amount_cents"] == lower and body["edited"] is True and body["decided_by"] == "reviewer1"
    item.refresh_from_db()
    assert (item.status, item.amount_cents) == ("approved", lower)
    assert AuditEvent.objects.filter(subject_id=str(item.pk), action="item.edited").exists()


@pytest.mark.parametrize("body", [
    {"reason": "ok", "edit": {"amount_cents": 1}},  # a misspelt field is not silently dropped
    {"reason": "ok", "edits": {"amount": 1}},
    {"reason": "ok", "edits": {"amount_cents": "lots"}},
    {"reason": "ok", "edits": {"amount_cents": 99999999999}},
    {"reason": "ok", "edits": {"body": "nul \x00"}},
    {"reason": "nul \x00"},
])
def test_approve_refuses_what_it_cannot_apply_with_nothing_changed(api, body):
    item = _pending(api.incident, K.REFUND_REVERSAL)
    before = row_counts(), (item.status, item.amount_cents, item.body)
    response = client_for(api.people.reviewer).post(f"/api/v1/review-items/{item.pk}/approve/", body, format="json")
    assert response.status_code == 400, response.content
    item.refresh_from_db()
    assert (row_counts(), (item.status, item.amount_cents, item.body)) == before


def test_the_schema_says_decided_by_may_be_null_and_limit_has_a_maximum():
    doc = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert doc["components"]["schemas"]["ReviewItem"]["properties"]["decided_by"].get("nullable") is True
    radius = doc["paths"]["/api/v1/sources/{id}/blast-radius/"]["get"]["parameters"]
    assert next(p for p in radius if p["name"] == "limit")["schema"]["maximum"] == 500
    assert "bearerAuth" in doc["components"]["securitySchemes"]
