"""Work handed out, not grabbed: "give me the next N" assigns disjoint batches under the workspace's lock.
Two reviewers asking for 30 at the same moment get 60 different cases; a request that gets none is a
warning that says why (never a green "0 cases"); the reviewer sees what is left in their batch beside
what is left in the incident. The admin button and the API action call the same service."""
from __future__ import annotations

import re
import threading

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from compensation.review import assignments
from compensation.models import AuditEvent, CaseAssignment, CompensationItem
from provenance.models import Workspace
from repairs.models import Incident
from tests.helpers import client_for, create_user

pytestmark = pytest.mark.django_db(transaction=True)
TICKETS = 100


@pytest.fixture
def desk():
    ws = Workspace.objects.create(name="batch-desk")
    lead = create_user("batch-lead", "Support lead", "Reviewer", workspaces=[ws])
    alice = create_user("alice", "Reviewer", workspaces=[ws])
    bob = create_user("bob", "Reviewer", workspaces=[ws])
    incident = Incident.objects.create(workspace=ws, run_number=1, source_id="blog/poison", reason="poisoned page",
                                       flagged_by=lead, flagged_via="admin", status="repaired")
    CompensationItem.objects.bulk_create(
        CompensationItem(incident=incident, kind="correction_email", draft_key=f"batch:{n}", ticket_id=f"t{n:04d}",
                         customer_email=f"c{n}@example.com", to=f"c{n}@example.com", subject="A correction",
                         body="Hello", valid=True) for n in range(TICKETS))
    return type("Desk", (), {"ws": ws, "lead": lead, "alice": alice, "bob": bob, "incident": incident})


def test_two_reviewers_asking_at_the_same_moment_get_disjoint_batches(desk):
    barrier, got, errors = threading.Barrier(2), {}, []

    def ask(user):
        try:
            barrier.wait(timeout=10)
            got[user.username] = assignments.next_batch(incident=desk.incident, actor=user, count=30,
                                                        reason="my share", via="admin")
        except Exception as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(u,)) for u in (desk.alice, desk.bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    a, b = set(got["alice"].tickets), set(got["bob"].tickets)
    assert len(a) == len(b) == 30 and not a & b and len(a | b) == 60
    assert CaseAssignment.objects.filter(incident=desk.incident).count() == 60
    assert set(CaseAssignment.objects.filter(assignee=desk.alice).values_list("ticket_id", flat=True)) == a
    assert AuditEvent.objects.filter(action="case.assigned", incident_id=desk.incident.pk).count() == 60
    assert got["alice"].left_in_batch == 30 and got["bob"].left_in_incident == TICKETS


def test_nothing_left_to_hand_out_is_a_warning_with_the_reason(desk):
    assert assignments.next_batch(incident=desk.incident, actor=desk.alice, count=60, reason="", via="admin").count == 60
    assert assignments.next_batch(incident=desk.incident, actor=desk.bob, count=40, reason="", via="admin").count == 40
    none = assignments.next_batch(incident=desk.incident, actor=desk.bob, count=30, reason="", via="admin")
    assert none.count == 0 and none.why_none == "every case that needs a decision is already with a reviewer (alice 60, bob 40)"
    assert assignments.batch_message(none).startswith("No cases given to you: every case")
    # Four-eyes: the incident's flagger gets none of its cases, and is told why.
    flagger = assignments.next_batch(incident=desk.incident, actor=desk.lead, count=5, reason="", via="admin")
    assert flagger.count == 0 and "four-eyes" in flagger.why_none
    with pytest.raises(PermissionError):
        assignments.next_batch(incident=desk.incident, actor=desk.alice, count=0, reason="", via="admin")


def test_the_admin_button_hands_out_and_warns_when_it_cannot(desk, client):
    client.force_login(desk.alice)
    url = reverse("admin:compensation_compensationitem_cases_next")
    response = client.post(url, {"incident": desk.incident.pk, "count": "30"})
    assert response.status_code == 302 and "assignee=me" in response["Location"]
    said = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert said == [("success", "30 cases given to you. 30 left in your batch, 100 left in the incident.")]
    page = client.get(reverse("admin:compensation_compensationitem_cases"), {"incident": desk.incident.pk}).content.decode()
    assert "30 left in your batch" in page and "100 left in the incident" in page and 'id="next-batch"' in page
    CaseAssignment.objects.exclude(assignee=desk.alice).delete()
    client.force_login(desk.bob)
    client.post(url, {"incident": desk.incident.pk, "count": "70"})
    response = client.post(url, {"incident": desk.incident.pk, "count": "30"})
    said = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert said[-1][0] == "warning" and "already with a reviewer (alice 30, bob 70)" in said[-1][1]
    # Claiming cases that are all someone else's is a warning too, never a green "0 cases claimed".
    bulk = reverse("admin:compensation_compensationitem_cases_bulk")
    mine = list(CaseAssignment.objects.filter(assignee=desk.alice).values_list("ticket_id", flat=True)[:3])
    response = client.post(bulk, {"case": [f"{desk.incident.pk}/{t}" for t in mine], "decision": "claim"})
    said = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert said[-1] == ("warning", "No cases claimed: every one of them is already with another reviewer (alice 3).")
    assert not any(re.search(r"\b0 case", text) for _, text in said)


def test_the_api_action_hands_out_the_same_way(desk):
    answer = client_for(desk.bob).post(f"/api/v1/incidents/{desk.incident.pk}/next-cases/", {"count": 25},
                                       format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["count"] == 25 and body["left_in_batch"] == 25 and body["left_in_incident"] == TICKETS
    assert body["tickets"] == [f"t{n:04d}" for n in range(25)]
    other = Workspace.objects.create(name="batch-other")
    stranger = create_user("stranger", "Reviewer", workspaces=[other])
    assert client_for(stranger).post(f"/api/v1/incidents/{desk.incident.pk}/next-cases/", {"count": 5},
                                     format="json").status_code == 404
