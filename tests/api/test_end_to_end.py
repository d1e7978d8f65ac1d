"""End to end through the API with a real Celery worker: flag, follow the repair to the article's numbers,
work the review queue as two different reviewers under four-eyes, download the report."""
import json

import pytest

from compensation.models import AuditEvent, CompensationItem
from repairs.models import Incident
from tests.helpers import client_for, verification_outcome, wait_for
from tests.api.test_api_access import assert_error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

CANONICAL_COUNTS = {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8, "new": 4}


def test_flag_repair_review_and_report_through_the_api(celery_worker_process, make_user, record_desk):
    ws, source = record_desk("api-e2e")
    # The lead may also review, so four-eyes (not only the role) is what stops them on their own incident.
    lead = make_user("e2e-lead", roles=["Support lead", "Reviewer"], workspaces=[ws])
    alice = make_user("e2e-alice", roles=["Reviewer"], workspaces=[ws])
    bob = make_user("e2e-bob", roles=["Reviewer"], workspaces=[ws])
    auditor = make_user("e2e-auditor", roles=["Auditor"], workspaces=[ws])
    as_lead, as_alice, as_bob, as_auditor = map(client_for, (lead, alice, bob, auditor))

    preview = as_lead.get(f"/api/v1/sources/{source.pk}/blast-radius/").json()
    assert preview["size"] == 25

    flagged = as_lead.post(f"/api/v1/sources/{source.pk}/flag/", {"reason": "partner blog invented a VIP rule"},
                           format="json")
    assert flagged.status_code == 201, flagged.content
    url = f"/api/v1/incidents/{flagged.json()['id']}/"

    def repaired():
        body = as_lead.get(url).json()
        assert body["status"] not in ("failed", "blocked"), body
        return body if body["status"] == "repaired" else None

    incident = wait_for(repaired, timeout=150, interval=0.5)
    assert incident["blast_radius"] == 25
    assert incident["counts"] == CANONICAL_COUNTS
    assert incident["effects_invalidated"] == 10 and incident["compensations"] == 10
    # The repair's own verification re-ran what the flagged page could change (its 21 actions), no remote agent.
    assert verification_outcome(incident["verification"]) == {
        "facts": 0, "decisions": 0, "effects": 0, "differences": [], "differences_total": 0,
        "scope": "radius", "actions_rerun": 21, "replay_calls": 0, "full": None}
    assert incident["verification"]["seconds"] >= 0
    assert incident["progress"]["percent"] == 100

    queue = as_alice.get("/api/v1/review-items/", {"incident": incident["id"], "limit": 200}).json()["results"]
    compensations = [i for i in queue if i["kind"] in ("refund_reversal", "correction_email")]
    assert len(compensations) == 10
    valid = [i for i in compensations if i["valid"] and i["status"] == "pending"]
    assert len(valid) >= 2
    # Two tickets: rejecting a reversal reopens the email of its own ticket that was approved (it spoke of it).
    first = valid[0]
    second = next(i for i in valid if i["ticket"] != first["ticket"])

    refusals_before = AuditEvent.objects.filter(action="item.refused").count()
    error = assert_error(as_lead.post(f"/api/v1/review-items/{first['id']}/approve/", {"reason": "mine"},
                                      format="json"), 403, "permission_denied")
    assert "four-eyes" in error["message"]
    assert_error(as_auditor.post(f"/api/v1/review-items/{first['id']}/approve/", {}, format="json"), 403)
    assert AuditEvent.objects.filter(action="item.refused").count() == refusals_before + 2

    approved = as_alice.post(f"/api/v1/review-items/{first['id']}/approve/", {"reason": "matches the ticket"},
                             format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] in ("approved", "executed") and approved.json()["decided_by"] == "e2e-alice"

    assert_error(as_bob.post(f"/api/v1/review-items/{second['id']}/reject/", {"reason": ""}, format="json"), 400)
    rejected = as_bob.post(f"/api/v1/review-items/{second['id']}/reject/", {"reason": "customer already called"},
                           format="json")
    assert rejected.status_code == 200, rejected.content
    assert rejected.json()["status"] == "rejected" and rejected.json()["decided_by"] == "e2e-bob"
    assert_error(as_alice.post(f"/api/v1/review-items/{second['id']}/approve/", {}, format="json"),
                 409, "decision_refused")
    decided = {i.pk: (i.status, i.decided_by.username) for i in
               CompensationItem.objects.filter(pk__in=[first["id"], second["id"]])}
    assert decided[second["id"]] == ("rejected", "e2e-bob")
    assert decided[first["id"]][1] == "e2e-alice"

    report = as_auditor.get(f"{url}report/", {"format": "json"})
    assert report.status_code == 200, report.content
    assert report["Content-Type"].startswith("application/json")
    assert f'incident-{incident["id"]}.json' in report["Content-Disposition"]
    body = json.loads(report.content)
    assert body["incident"]["flagged_via"] == "api" and body["incident"]["flagged_by"] == "e2e-lead"
    assert body["outcome"]["blast_radius"] == 25 and body["outcome"]["counts"] == CANONICAL_COUNTS
    assert {k: body["verification"][k] for k in ("facts", "decisions", "effects")} == {
        k: incident["verification"][k] for k in ("facts", "decisions", "effects")}
    assert Incident.objects.get(pk=incident["id"]).status == "repaired"
    tables = as_auditor.get(f"{url}report/", {"format": "csv"})
    assert tables["Content-Type"] == "application/zip" and tables.content[:2] == b"PK"
    pdf = as_auditor.get(f"{url}report/", {"format": "pdf"})
    assert pdf["Content-Type"] == "application/pdf" and pdf.content[:5] == b"%PDF-"
    assert_error(as_auditor.get(f"{url}report/", {"format": "docx"}), 400, "invalid")
