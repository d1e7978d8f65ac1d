"""`python -m bench reviewers --quick`: two reviewers work a repaired incident's cases in Debian's chromium
(claims, filters, bulk decisions behind the confirmation page, one undo through the toast), beside one
reviewer alone and the keyboard case by case, in a process of its own with its own FalkorDB, broker and
database (dropped afterwards). Asserts what the database says after each run, not timings (the box is
shared; the bench prints those). The check the bench runs has its red cases here too."""

import pytest

from tests.helpers import run_quick_bench


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_reviewers_quick_decide_every_case_once_with_one_undo_and_count_their_page_loads(tmp_path):
    r, printed = run_quick_bench("reviewers", tmp_path, own_home=True, timeout=840)
    assert r["mode"] == "quick" and r["ok"]
    runs = {run["run"]: run for run in r["runs"]}
    assert list(runs) == ["two reviewers at once", "one reviewer, the same plan", "one reviewer, case by case (keyboard)"]
    outcomes = set()
    for run in r["runs"]:
        check = run["check"]
        assert check["problems"] == [], (run["run"], check["problems"])
        assert run["colliding_claims"] == check["colliding_claims"] == 0, run["run"]
        assert check["cases"] > 0 and check["cases_decided"] == check["cases"]
        assert set(check["statuses"]) <= {"approved", "rejected"} and sum(check["statuses"].values()) == check["items"]
        assert run["page_loads"] >= run["navigations"] > 0 and run["wall_s"] > 0
        # Every approval that sends an email showed that email's body before it was made.
        assert run["emails_shown_before_approval"] == run["approvals_with_email"] > 0, run["run"]
        outcomes.add(tuple(sorted(check["statuses"].items())))
        outcomes.add(("rejected cases",) + tuple(check["rejected_cases"]))
    assert len(outcomes) == 2, outcomes  # the three runs did the same work: the same items approved and rejected
    two = runs["two reviewers at once"]
    assert [p["reviewer"] for p in two["per_reviewer"]] == ["ana", "ben"]
    assert all(p["page_loads"] > 0 and p["cases_claimed"] > 0 for p in two["per_reviewer"])
    assert sum(p["cases_claimed"] for p in two["per_reviewer"]) == two["cases"]  # each case claimed once
    assert two["check"]["cases_assigned"] == two["cases"]
    # Each reviewer asked until an ask gave nothing, and read why.
    assert all(p["batches_asked"] >= 2 and p["none_given"] and p["none_given"][-1].startswith("No cases given to you")
               for p in two["per_reviewer"]), two["per_reviewer"]
    assert len(two["check"]["cases_by_reviewer"]) == 2 and sum(two["check"]["cases_by_reviewer"].values()) == two["cases"]
    assert [p["undone"] for p in two["per_reviewer"]] == [1, 0] and len(two["check"]["undone_cases"]) == 1
    assert runs["one reviewer, case by case (keyboard)"]["check"]["undone_cases"] == []
    assert "Reviewers in chromium" in printed and "page loads" in printed


def _problems(incident, **kw) -> list[str]:
    from bench.reviewers import verify

    return verify(incident, **kw)["problems"]


def verify_colliding(incident) -> int:
    from bench.reviewers import verify

    return verify(incident, undo_expected=True)["colliding_claims"]


def test_the_reviewers_check_catches_pending_doubled_undone_and_taken_over_cases(repaired_desk, db, settings):
    """The red cases of the bench's check: it holds for an incident decided once per item with one undo,
    and names a pending item, an item decided twice, a missing undo and a case taken from its claimer
    (a colliding claim: the case was assigned to two reviewers)."""
    from compensation.delivery import approval
    from compensation.review import assignments
    from compensation.models import CompensationItem
    from compensation.review.services import approve_item
    from core.audit import trail
    from core.vocabulary import AuditAction
    from repairs.models import Incident

    settings.KINTSUGI_UNDO_SECONDS = 60
    incident, people = Incident.objects.get(pk=repaired_desk.incident_id), repaired_desk.people
    reviewer = people.reviewer
    untouched = _problems(incident, undo_expected=True)
    assert sum("still pending" in p for p in untouched) == incident.compensation_items.count()
    assert "expected one undone case, found []" in untouched

    assignments.claim(keys=[(incident.pk, t) for t in ("t04", "t05", "t06", "t07", "t08")], actor=reviewer,
                      reason="mine", via="admin")
    items = list(incident.compensation_items.order_by("pk"))
    for item in items:
        approve_item(item=item, actor=reviewer, reason="ok", via="admin")
    first = CompensationItem.objects.get(pk=items[0].pk)
    approval.undo(item=first, actor=reviewer, reason="wrong", via="admin")
    approve_item(item=CompensationItem.objects.get(pk=first.pk), actor=reviewer, reason="ok after all", via="admin")
    assert _problems(incident, undo_expected=True) == []
    assert verify_colliding(incident) == 0
    assert _problems(incident, undo_expected=False) == [f"no undo expected, found ['{first.ticket_id}']"]

    doubled = items[1]
    trail.record(action=AuditAction.ITEM_APPROVED, subject_type="compensation_item", subject_id=doubled.pk,
                 via="admin", actor=reviewer, reason="again", incident_id=incident.pk, workspace=incident.workspace_id,
                 from_status="pending", to_status="approved")
    assignments.assign(keys=[(incident.pk, "t08")], assignee=people.lead_reviewer, actor=reviewer, reason="x",
                       via="admin")
    found = _problems(incident, undo_expected=True)
    assert f"item #{doubled.pk} ({doubled.ticket_id}) decided 2x, undone 0x" in found
    assert f"case {incident.pk}/t08 taken from {reviewer.username} by {people.lead_reviewer.username}" in found
    assert any("decided by someone other than their case's reviewer" in p for p in found)
    assert verify_colliding(incident) == 1
    assert f"1 case(s) assigned to more than one reviewer: ['{incident.pk}/t08']" in found
