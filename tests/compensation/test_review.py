import json

import pytest
from django.core.management import call_command

from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import (DecisionRefused, ReviewRefused, approve_item, bulk_approve, redraft_item, reject_item,
                                   set_customer)

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind


@pytest.fixture
def incident(canonical):
    return canonical.incident


@pytest.fixture
def people(canonical):
    return canonical.people


def _first(incident, kind=K.REFUND_REVERSAL, ticket="t05"):
    return incident.compensation_items.get(kind=kind, ticket_id=ticket)


def _refusals(actor):
    return list(AuditEvent.objects.filter(action="item.refused", actor=actor).values_list("reason", flat=True))


def test_flagger_cannot_approve_their_own_incident_even_with_the_reviewer_role(incident, people):
    item = _first(incident)
    with pytest.raises(ReviewRefused, match="four-eyes"):
        approve_item(item=item, actor=people.lead_reviewer, reason="mine", via="admin")
    item.refresh_from_db()
    assert item.status == "pending"
    assert len(_refusals(people.lead_reviewer)) == 1  # the refused attempt is on the record


def test_reviewer_approves_and_the_execution_key_is_recorded_with_the_approval(incident, people):
    item = approve_item(item=_first(incident), actor=people.reviewer, reason="checked with payments", via="admin")
    assert (item.status, item.decided_by, item.decision_reason) == ("approved", people.reviewer, "checked with payments")
    assert item.execution_key == f"compensation:{item.pk}"
    event = AuditEvent.objects.get(action="item.approved", subject_id=str(item.pk))
    assert (event.actor, event.via, event.from_status, event.to_status) == (people.reviewer, "admin", "pending", "approved")


def test_auditor_and_support_lead_can_only_read(incident, people):
    item = _first(incident)
    for actor in (people.auditor, people.lead):
        with pytest.raises(ReviewRefused, match="Reviewer role"):
            approve_item(item=item, actor=actor, reason="x", via="admin")
        with pytest.raises(ReviewRefused, match="Reviewer role"):
            reject_item(item=item, actor=actor, reason="x", via="admin")
        assert len(_refusals(actor)) == 2
    item.refresh_from_db()
    assert item.status == "pending"


def test_reject_needs_a_reason_and_a_decided_item_cannot_be_decided_again(incident, people):
    item = _first(incident)
    with pytest.raises(DecisionRefused, match="reason"):
        reject_item(item=item, actor=people.reviewer, reason="  ", via="cli")
    reject_item(item=item, actor=people.reviewer, reason="customer already returned the money", via="cli")
    with pytest.raises(DecisionRefused, match="already rejected"):
        approve_item(item=item, actor=people.reviewer, reason="changed my mind", via="cli")
    assert _refusals(people.reviewer) == [f"item #{item.pk} is already rejected"]


def test_relaxed_four_eyes_lets_the_flagger_decide_and_is_audited(incident, people, settings):
    settings.KINTSUGI_FOUR_EYES = False
    item = approve_item(item=_first(incident), actor=people.lead_reviewer, reason="single-person team", via="admin")
    assert item.status == "approved"
    relaxed = AuditEvent.objects.get(action="four_eyes.relaxed")
    assert (relaxed.actor, relaxed.subject_id, relaxed.data["decision"]) == (people.lead_reviewer, str(item.pk), "approve")


def test_edit_then_approve_records_the_edit(incident, people):
    item = _first(incident, K.CORRECTION_EMAIL, "t06")
    new_body = item.body + " A colleague will call you tomorrow."
    item = approve_item(item=item, actor=people.reviewer, reason="friendlier", via="admin", edits={"body": new_body})
    assert (item.status, item.edited, item.body) == ("approved", True, new_body)
    edit = AuditEvent.objects.get(action="item.edited", subject_id=str(item.pk))
    assert edit.data["changes"]["body"]["after"] == new_body and edit.actor == people.reviewer


def test_an_edit_that_fails_validation_is_refused_and_not_saved(incident, people):
    item = _first(incident)
    original_amount = item.amount_cents
    with pytest.raises(DecisionRefused, match="above"):
        approve_item(item=item, actor=people.reviewer, reason="more", via="admin", edits={"amount_cents": 10**6})
    item.refresh_from_db()
    assert (item.status, item.amount_cents, item.edited) == ("pending", original_amount, False)
    assert not AuditEvent.objects.filter(action="item.edited").exists()


def test_bulk_approve_approves_each_and_reports_refusals(incident, people):
    items = list(incident.compensation_items.all())
    reject_item(item=items[0], actor=people.reviewer, reason="duplicate", via="admin")
    result = bulk_approve(items=items, actor=people.reviewer, reason="bulk", via="admin")
    assert len(result.approved) == len(items) - 1 and [i.pk for i, _ in result.refused] == [items[0].pk]


def _run(capsys, *args):
    try:
        call_command(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_contract(incident, people, capsys):
    code, out, _ = _run(capsys, "review_queue", "--workspace", incident.workspace.name, "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 10 and sum(r["kind"] in ("refund_reversal", "correction_email") for r in rows) == 10
    assert set(rows[0]) == {"id", "incident", "kind", "ticket", "amount", "status", "valid", "compensates"}
    assert all(r["valid"] for r in rows)
    item = rows[0]["id"]
    code, _, err = _run(capsys, "review", "--item", str(item), "--decision", "approve", "--user", "leadrev1", "--reason", "self")
    assert code == 2 and err.startswith("error: four-eyes") and err.count("\n") == 1
    code, _, err = _run(capsys, "review", "--item", str(item), "--decision", "approve", "--user", "auditor1", "--reason", "x")
    assert code == 2 and "Reviewer role" in err
    code, out, _ = _run(capsys, "review", "--item", str(item), "--decision", "approve", "--user", "reviewer1",
                        "--reason", "ok", "--json")
    assert code == 0 and json.loads(out)["status"] in ("approved", "executed")
    code, _, err = _run(capsys, "review", "--item", str(item), "--decision", "reject", "--user", "reviewer1", "--reason", "x")
    assert code == 2 and "already" in err
    code, _, err = _run(capsys, "review", "--item", "999999", "--decision", "reject", "--user", "reviewer1", "--reason", "x")
    assert code == 2 and "unknown compensation item" in err
    invalid = rows[1]["id"]
    CompensationItem.objects.filter(pk=invalid).update(body="Pay at https://evil.example", valid=False,
                                                        problems=["body: link https://evil.example is not in the ticket"])
    code, _, err = _run(capsys, "review", "--item", str(invalid), "--decision", "approve", "--user", "reviewer1",
                        "--reason", "x")
    assert code == 2 and "failed validation" in err and err.count("\n") == 1
    code, out, _ = _run(capsys, "review_queue", "--workspace", incident.workspace.name, "--json")
    assert {r["id"]: r["valid"] for r in json.loads(out)}[invalid] is False
    code, out, _ = _run(capsys, "review_queue", "--workspace", incident.workspace.name)
    assert code == 0 and f"#{item}" in out and "INVALID" in out
    via = set(AuditEvent.objects.filter(subject_id=str(item), subject_type="compensation_item").values_list("via", flat=True))
    assert via == {"worker", "cli"}


def test_an_item_no_longer_pending_is_refused_by_each_change_with_its_own_reason(incident, people):
    item = approve_item(item=_first(incident), actor=people.reviewer, reason="checked", via="admin")
    with pytest.raises(DecisionRefused, match=rf"^item #{item.pk} is approved; only pending items are redrafted$"):
        redraft_item(item=item, actor=people.reviewer, reason="draft it again", via="admin")
    with pytest.raises(DecisionRefused, match=rf"^item #{item.pk} is approved; only a pending item's customer is set$"):
        set_customer(item=item, name="Ann", email="ann@example.com", actor=people.reviewer, reason="named", via="admin")
    with pytest.raises(DecisionRefused, match=rf"^item #{item.pk} is already approved$"):
        reject_item(item=item, actor=people.reviewer, reason="changed my mind", via="admin")
    item.refresh_from_db()
    assert item.status == "approved"


def test_the_review_cli_shows_what_each_item_compensates_as_the_api_does(incident, people, capsys):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(people.reviewer)
    code, out, _ = _run(capsys, "review_queue", "--workspace", incident.workspace.name, "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    reversal = _first(incident)
    shown = api.get(f"/api/v1/review-items/{reversal.pk}/").json()["compensates"]
    assert shown and rows[reversal.pk]["compensates"] == shown
    assert all(rows[pk]["compensates"] for pk in rows)  # every drafted item compensates or releases something
    code, out, _ = _run(capsys, "review_queue", "--workspace", incident.workspace.name)
    refund = next(e for e in shown if e["role"] == "invalidated")
    assert code == 0 and (f"refund #{refund['effect_id']} of action {refund['action_id']} (invalidated, key "
                          f"{refund['idempotency_key']})") in out
    code, out, _ = _run(capsys, "review", "--item", str(reversal.pk), "--decision", "approve", "--user", "reviewer1",
                        "--reason", "ok", "--json")
    assert code == 0 and json.loads(out)["compensates"] == shown


def test_the_review_queue_text_shows_an_agents_key_with_control_characters_as_a_literal():
    from compensation.management.commands.review_queue import effect_words

    effect = {"kind": "refund", "effect_id": 3, "action_id": 9, "role": "invalidated",
              "idempotency_key": "r-1\x1b[2J"}
    assert effect_words(effect) == "refund #3 of action 9 (invalidated, key 'r-1\\x1b[2J')"
    assert effect_words(effect | {"idempotency_key": "r-1"}) == "refund #3 of action 9 (invalidated, key r-1)"
    assert effect_words(effect | {"idempotency_key": None}).endswith("(invalidated, never left)")


def test_the_flagger_cannot_redraft_their_own_incidents_items_on_any_door(incident, people, client, settings):
    """The README says a Reviewer never redrafts an item of an incident they flagged; the flagger with the
    Reviewer role used to write the draft the second person is then asked to approve."""
    item = _first(incident)
    before = (item.body, item.subject, item.amount_cents)
    with pytest.raises(ReviewRefused, match="four-eyes"):
        redraft_item(item=item, actor=people.lead_reviewer, reason="my words", via="admin")
    client.force_login(people.lead_reviewer)
    page = client.post(f"/admin/compensation/compensationitem/{item.pk}/decide/",
                       {"decision": "redraft", "reason": "my words"}, follow=True)
    assert "four-eyes" in page.content.decode()
    client.post("/admin/compensation/compensationitem/", {"action": "redraft", "_selected_action": [item.pk]})
    item.refresh_from_db()
    assert (item.body, item.subject, item.amount_cents) == before
    assert not AuditEvent.objects.filter(action="item.redrafted", subject_id=str(item.pk)).exists()
    assert sum("four-eyes" in r for r in _refusals(people.lead_reviewer)) == 3  # each attempt is on the record
    redraft_item(item=item, actor=people.reviewer, reason="a second person's redraft", via="admin")
    settings.KINTSUGI_FOUR_EYES = False  # a single-person team: the setting relaxes it, as for decisions
    redraft_item(item=item, actor=people.lead_reviewer, reason="single-person team", via="admin")
    assert AuditEvent.objects.filter(action="item.redrafted", subject_id=str(item.pk)).count() == 2
