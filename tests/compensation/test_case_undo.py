"""The undo toast on the case desk: after a case, an item or a bulk confirmation is decided, the next page
offers to take the decision back while the undo window is open; Undo puts exactly those items back to
pending (audited) and opens the case again. No window, a closed window or someone else's decision: no undo."""
from __future__ import annotations

from datetime import timedelta

import pytest

from compensation.review import case_undo
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item

pytestmark = pytest.mark.django_db
St = CompensationItem.Status
CASES = "/admin/compensation/compensationitem/cases/"
BULK = "/admin/compensation/compensationitem/cases/bulk/"
UNDO = "/admin/compensation/compensationitem/cases/undo/"


def _decide(incident) -> str:
    return f"/admin/compensation/compensationitem/case-decisions/{incident.pk}/t05/?incident={incident.pk}"


def _statuses(incident, *tickets) -> set[str]:
    return set(incident.compensation_items.filter(ticket_id__in=tickets).values_list("status", flat=True))


def test_a_case_decision_is_offered_for_undo_and_undo_reopens_the_case(canonical, client, settings):
    settings.KINTSUGI_UNDO_SECONDS = 30
    incident, reviewer = canonical.incident, canonical.people.reviewer
    client.force_login(reviewer)
    n = incident.compensation_items.filter(ticket_id="t05").count()
    following = client.post(_decide(incident), {"decision": "approve_all"}, follow=True)
    page = following.content.decode()
    assert "/t06/" in following.redirect_chain[-1][0]  # the next case opened, and the toast came along
    assert 'id="undo-toast"' in page and f"Case t05: {n} item{'' if n == 1 else 's'} approved." in page
    assert f'action="{UNDO}"' in page
    assert _statuses(incident, "t05") == {St.APPROVED}

    back = client.post(UNDO)
    assert back.status_code == 302 and back["Location"] == f"{CASES}{incident.pk}/t05/?incident={incident.pk}"
    assert _statuses(incident, "t05") == {St.PENDING}
    undone = AuditEvent.objects.filter(action="item.decision_undone", incident_id=incident.pk, actor=reviewer)
    assert undone.count() == n and set(undone.values_list("reason", flat=True)) == {"undone from the toast"}
    assert 'id="undo-toast"' not in client.get(back["Location"]).content.decode()  # offered once: taken
    assert "Nothing to undo." in [str(m) for m in client.post(UNDO, follow=True).context["messages"]]


def test_a_bulk_decision_is_undone_whole_from_the_toast(canonical, client, settings):
    settings.KINTSUGI_UNDO_SECONDS = 30
    incident = canonical.incident
    client.force_login(canonical.people.reviewer)
    back = f"incident={incident.pk}&state=needs_decision"
    client.post(BULK, {"case": [f"{incident.pk}/t04", f"{incident.pk}/t06"], "decision": "reject", "confirm": "yes",
                       "reason": "customer already returned the refund", "filters": back})
    assert _statuses(incident, "t04", "t06") == {St.REJECTED}
    assert 'id="undo-toast"' in client.get(f"{CASES}?{back}").content.decode()
    answer = client.post(UNDO)
    assert answer["Location"] == f"{CASES}?{back}"  # several cases: back to the list they were decided from
    assert _statuses(incident, "t04", "t06") == {St.PENDING}


def test_no_toast_without_a_window_nor_once_it_has_closed(canonical, client, settings):
    incident = canonical.incident
    client.force_login(canonical.people.reviewer)
    settings.KINTSUGI_UNDO_SECONDS = 0  # the default: decisions are final at once
    assert 'id="undo-toast"' not in client.post(_decide(incident), {"decision": "approve_all"}, follow=True).content.decode()

    settings.KINTSUGI_UNDO_SECONDS = 30
    client.post(BULK, {"case": [f"{incident.pk}/t06"], "decision": "approve", "confirm": "yes", "reason": "ok"})
    assert 'id="undo-toast"' in client.get(f"{CASES}?incident={incident.pk}").content.decode()
    incident.compensation_items.filter(ticket_id="t06").update(decided_at=incident.compensation_items.filter(
        ticket_id="t06").first().decided_at - timedelta(seconds=31))
    session = client.session
    session[case_undo.SESSION_KEY] = {**session[case_undo.SESSION_KEY], "until": 0}
    session.save()
    assert 'id="undo-toast"' not in client.get(f"{CASES}?incident={incident.pk}").content.decode()
    client.post(UNDO)
    assert _statuses(incident, "t06") == {St.APPROVED}


def test_the_toast_undoes_only_the_persons_own_decisions(canonical, client, settings):
    """The session names items; the undo still asks the service, which refuses another person's decision."""
    settings.KINTSUGI_UNDO_SECONDS = 30
    incident, reviewer, other = canonical.incident, canonical.people.reviewer, canonical.people.auditor
    item = incident.compensation_items.get(ticket_id="t07", kind=CompensationItem.Kind.REFUND_REVERSAL)
    approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    other.groups.add(*reviewer.groups.all())
    client.force_login(other)
    session = client.session
    session[case_undo.SESSION_KEY] = {"items": [item.pk], "text": "forged", "case_url": "", "back": CASES,
                                      "until": 4102444800.0}
    session.save()
    said = [str(m) for m in client.post(UNDO, follow=True).context["messages"]]
    assert any("only the person who decided" in m for m in said), said
    item.refresh_from_db()
    assert item.status == St.APPROVED
