import pytest

from compensation.drafting.netting import plan_items
from compensation.models import CompensationItem
from compensation.drafting.drafts import draft_compensations
from compensation.review.services import approve_item
from repairs.services import flag_source
from repairs.job import run_repair
from tests.helpers import repaired_incident

K = CompensationItem.Kind


@pytest.fixture
def people(canonical):
    return canonical.people


def _eff(role, kind, ticket, amount, effect_id, details=None):
    return {"role": role, "kind": kind, "ticket": ticket, "amount_cents": amount, "currency": "USD",
            "effect_id": effect_id, "action_id": effect_id, "details": details or {}}


def test_full_refund_that_should_be_partial_nets_into_one_reversal_for_the_difference():
    items = plan_items([_eff("invalidated", "refund", "t04", 11000, 7), _eff("replacement", "refund", "t04", 5500, 40),
                        _eff("invalidated", "email", "t04", 11000, 8), _eff("replacement", "email", "t04", 5500, 41)])
    assert [(i.kind, i.amount_cents, i.situation) for i in items] == [
        ("refund_reversal", 5500, "refund_reduced"), ("correction_email", 0, "refund_reduced")]
    assert {e["effect_id"] for e in items[0].effects} == {7, 40}
    assert {e["effect_id"] for e in items[1].effects} == {8, 41}  # the new confirmation is folded in


def test_reply_instead_of_refund_reverses_all_and_folds_the_reply_into_the_one_correction():
    items = plan_items([_eff("invalidated", "refund", "t05", 7500, 9), _eff("invalidated", "email", "t05", 7500, 10),
                        _eff("replacement", "email", "t05", 0, 42)])
    assert [(i.kind, i.amount_cents) for i in items] == [("refund_reversal", 7500), ("correction_email", 0)]
    assert {e["effect_id"] for e in items[1].effects} == {10, 42}  # one message carries the reply


def test_a_new_message_without_anything_to_correct_stays_its_own_item():
    items = plan_items([_eff("replacement", "email", "t05", 0, 42)])
    assert [i.kind for i in items] == ["replacement_email"]


def test_netting_when_the_corrected_refund_is_larger_pays_only_the_difference():
    items = plan_items([_eff("invalidated", "refund", "t09", 3000, 1), _eff("replacement", "refund", "t09", 5000, 2)])
    assert [(i.kind, i.amount_cents, i.compensates) for i in items] == [("replacement_refund", 2000, True)]


def test_netting_to_zero_moves_no_money_but_still_explains():
    items = plan_items([_eff("invalidated", "refund", "t09", 3000, 1), _eff("replacement", "refund", "t09", 3000, 2),
                        _eff("invalidated", "email", "t09", 3000, 3)])
    assert [(i.kind, i.situation) for i in items] == [("correction_email", "refund_unchanged")]


@pytest.mark.django_db
def test_canonical_repair_drafts_ten_compensations_and_one_message_per_customer(canonical):
    incident = canonical.incident
    assert incident.status == "repaired"
    assert incident.compensations == 10  # the receiver's return value
    items = list(incident.compensation_items.order_by("ticket_id", "kind"))
    comp = [i for i in items if i.is_compensation]
    assert sorted(i.kind for i in comp) == ["correction_email"] * 5 + ["refund_reversal"] * 5
    # The replies t05-t08 got instead of a refund ride in their correction: one message per customer.
    assert [i for i in items if not i.is_compensation] == []
    mails = [i for i in items if i.kind == K.CORRECTION_EMAIL]
    assert len({i.customer_email for i in mails}) == len(mails) == 5
    reversals = {i.ticket_id: i.amount_cents for i in comp if i.kind == K.REFUND_REVERSAL}
    # t04 was paid 110.00 in full; the clean policy gives 50%: reverse the 55.00 difference only.
    assert reversals == {"t04": 5500, "t05": 7500, "t06": 9000, "t07": 10000, "t08": 8000}
    assert all(i.valid and i.status == "pending" for i in items), [(i.pk, i.problems) for i in items if not i.valid]
    assert all(i.drafted_by.startswith("offline (deterministic)") for i in comp)
    t04 = next(i for i in comp if i.ticket_id == "t04" and i.kind == K.REFUND_REVERSAL)
    assert t04.payment_reference.startswith("ch_") and t04.customer_email == "dev.patel@customers.example"
    t04_mail = next(i for i in comp if i.ticket_id == "t04" and i.kind == K.CORRECTION_EMAIL)
    assert "$55.00" in t04_mail.body and "$110.00" in t04_mail.body and t04_mail.to == t04.customer_email
    assert "USD" not in t04_mail.body and "t04" not in t04_mail.subject + t04_mail.body  # no codes, no ids
    t05_mail = next(i for i in comp if i.ticket_id == "t05" and i.kind == K.CORRECTION_EMAIL)
    assert "$75.00 back" in t05_mail.body and "corrected answer" in t05_mail.body
    assert "does not qualify for a refund" in t05_mail.body.split("corrected answer", 1)[1]  # the reply itself
    # The path names the flagged page, the poisoned ingest and the superseded refund of t05.
    t05 = next(i for i in comp if i.ticket_id == "t05" and i.kind == K.REFUND_REVERSAL)
    steps = t05.path[0]["steps"]
    assert steps[0]["label"] == "partner-blog/policy-update" and steps[1]["status"] == "poisoned"
    assert [s["status"] for s in steps[2:]] == ["rerun_changed", "superseded", "invalidated"]


@pytest.mark.django_db
def test_drafting_again_for_the_same_repair_adds_nothing(canonical):
    incident = canonical.incident
    before = incident.compensation_items.count()
    assert draft_compensations(incident=incident) == 10
    assert incident.compensation_items.count() == before == 10


@pytest.mark.django_db
def test_a_later_incident_that_cancels_held_replacements_nets_their_items_again(people):
    first = repaired_incident(flagger=people.lead)
    t04_reversal = first.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t04")  # 110 paid, 55 kept
    approve_item(item=t04_reversal, actor=people.reviewer, reason="ok", via="admin")
    # Flagging the refund policy too: without it t04 gets no refund at all, so the 55.00 the customer
    # kept through the approved netting must come back as well, and the pending items holding the
    # replacements this repair cancels are drafted again.
    second = flag_source(workspace=first.workspace, source_id="acme/refund-policy", actor=people.lead, reason="bad too",
                         via="cli")
    second = run_repair(incident_id=second.pk)
    assert second.status == "repaired"
    old = {i.kind: i.status for i in first.compensation_items.filter(ticket_id="t04")}
    assert old == {"refund_reversal": "approved", "correction_email": "cancelled"}
    assert first.compensation_items.filter(kind=K.REPLACEMENT_EMAIL, status="pending").count() == 0
    new = {i.kind: i for i in second.compensation_items.filter(ticket_id="t04")}
    assert new[K.REFUND_REVERSAL].amount_cents == 5500  # 55.00 reversed before + 55.00 now = the 110.00 paid
    assert [(e["role"], e["effect_id"]) for e in new[K.REFUND_REVERSAL].original] == [
        ("invalidated", t04_reversal.original[1]["effect_id"])]
    # The reply the re-run wrote instead of the refund rides in the one correction the customer gets.
    assert new[K.CORRECTION_EMAIL].valid and K.REPLACEMENT_EMAIL not in new
    assert "corrected answer" in new[K.CORRECTION_EMAIL].body
    assert second.compensations == second.compensation_items.filter(original__contains=[{"role": "invalidated"}]).count()
