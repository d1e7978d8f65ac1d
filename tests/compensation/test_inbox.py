"""The reviewer's landing answers "what is mine to do": one row per incident that waits for a reviewer,
with the lead's reason, the incidents holding my cases first; an incident's cases page repeats the reason."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from compensation.review import assignments
from compensation.review.incident_figures import inbox, recovery_by_incident
from compensation.models import CompensationItem
from provenance.models import Workspace
from repairs.models import Incident
from tests.helpers import create_user

pytestmark = pytest.mark.django_db


def _incident(ws, lead, source: str, reason: str, tickets: int) -> Incident:
    incident = Incident.objects.create(workspace=ws, run_number=1, source_id=source, reason=reason, flagged_by=lead,
                                       flagged_via="admin", status="repaired")
    CompensationItem.objects.bulk_create(
        CompensationItem(incident=incident, kind="refund_reversal", draft_key=f"{source}:{n}", ticket_id=f"t{n:04d}",
                         customer_email=f"c{n}@example.com", amount_cents=1000, currency="USD", valid=True)
        for n in range(tickets))
    return incident


@pytest.fixture
def desk():
    ws = Workspace.objects.create(name="inbox-desk")
    lead = create_user("inbox-lead", "Support lead", workspaces=[ws])
    alice = create_user("alice", "Reviewer", workspaces=[ws])
    older = _incident(ws, lead, "blog/older", "the blog tells agents to refund without checks", 4)
    newer = _incident(ws, lead, "blog/newer", "a wiki edit drops the verification step", 3)
    return type("Desk", (), {"ws": ws, "lead": lead, "alice": alice, "older": older, "newer": newer})


def test_the_inbox_puts_the_incidents_holding_my_cases_first_with_the_leads_reason(desk):
    assert [r.incident.pk for r in inbox(user=desk.alice)] == [desk.newer.pk, desk.older.pk]  # newest first
    assignments.claim(keys=[(desk.older.pk, "t0001"), (desk.older.pk, "t0002")], actor=desk.alice, reason="mine",
                      via="admin")
    rows = inbox(user=desk.alice)
    assert [(r.incident.pk, r.mine_pending, r.cases_pending, r.cases) for r in rows] == [
        (desk.older.pk, 2, 4, 4), (desk.newer.pk, 0, 3, 3)]
    assert rows[0].money == "$40.00"
    html = _admin(desk.alice).get(reverse("admin:compensation_compensationitem_cases")).content.decode()
    assert html.index("the blog tells agents to refund without checks") < html.index("a wiki edit drops")
    assert f"?incident={desk.older.pk}&amp;assignee=me" in html and "Open my cases" in html
    # A decided case is no longer mine to do; an incident with nothing pending leaves the inbox.
    CompensationItem.objects.filter(incident=desk.newer).update(status="rejected")
    assert [r.incident.pk for r in inbox(user=desk.alice)] == [desk.older.pk]


def test_an_incidents_cases_page_says_why_the_lead_flagged_it(desk):
    page = _admin(desk.alice).get(reverse("admin:compensation_compensationitem_cases") + f"?incident={desk.newer.pk}")
    html = page.content.decode()
    assert 'id="lead-reason"' in html and "a wiki edit drops the verification step" in html
    assert 'id="case-inbox"' not in html


def test_the_inbox_shows_another_workspaces_incidents_to_nobody(desk):
    other = Workspace.objects.create(name="inbox-other")
    outsider = create_user("outsider", "Reviewer", workspaces=[other])
    assert inbox(user=outsider) == []


def test_recovery_splits_what_was_paid_wrongly_by_what_became_of_it(desk):
    items = list(CompensationItem.objects.filter(incident=desk.older).order_by("pk"))
    CompensationItem.objects.filter(pk=items[0].pk).update(status="executed")
    CompensationItem.objects.filter(pk=items[1].pk).update(status="rejected")
    CompensationItem.objects.filter(pk=items[2].pk).update(status="approved")
    found = recovery_by_incident(incident_ids=[desk.older.pk])[desk.older.pk]
    assert found.shown == {"wrongly_paid": "$40.00", "to_recover": "$20.00", "recovered": "$10.00",
                           "not_asked": "$10.00"}
    assert found.waiting


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client
