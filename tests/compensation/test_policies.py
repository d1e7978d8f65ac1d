"""Review policies on the canonical incident: the rule language (parsed, refused when it is not one), the
preview the command prints, four eyes on the rule, per-item checks, and preview = applied."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from compensation.review import policies
from compensation.models import AuditEvent, CompensationItem, ReviewPolicy
from core.roles import REVIEWER
from compensation.review.services import reject_item

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status


def _second_reviewer(canonical, make_user):
    user = make_user("reviewer2", REVIEWER)
    canonical.incident.workspace.members.add(user)
    return user


def test_the_command_previews_a_rule_as_json_and_changes_nothing(canonical):
    incident = canonical.incident
    out = io.StringIO()
    call_command("review_policy", "--incident", incident.pk, "--rule", "kind=correction_email", "--preview", "--json",
                 stdout=out)
    emails = incident.compensation_items.filter(kind=K.CORRECTION_EMAIL)
    assert json.loads(out.getvalue()) == {"cases": emails.values("ticket_id").distinct().count(),
                                          "items": emails.count(), "amount_cents": 0}
    assert not incident.compensation_items.exclude(status=St.PENDING).exists()
    assert not ReviewPolicy.objects.exists()
    money = policies.preview(incident=incident, rule="kind=refund_reversal AND amount<=7500")
    reversals = incident.compensation_items.filter(kind=K.REFUND_REVERSAL, amount_cents__lte=7500)
    assert money.items == reversals.count() > 0
    assert money.amount_cents == sum(reversals.values_list("amount_cents", flat=True))
    assert policies.preview(incident=incident, rule="amount<$75.00, validated=true").items == \
        incident.compensation_items.filter(amount_cents__lt=7500, valid=True).count()


@pytest.mark.parametrize("rule", ["kind=bribe", "__import__('os').system('x')", "amount<lots", "validated=maybe",
                                  "kind>correction_email", "", "ticket=t05; drop table"])
def test_a_rule_outside_the_language_is_refused(canonical, rule):
    with pytest.raises(policies.RuleError):
        policies.parse(rule)
    with pytest.raises(SystemExit) as exited:
        call_command("review_policy", "--incident", canonical.incident.pk, "--rule", rule, "--preview",
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert exited.value.code == 2


def test_a_second_person_applies_exactly_what_was_previewed(canonical, make_user):
    incident, author = canonical.incident, canonical.people.reviewer
    applier = _second_reviewer(canonical, make_user)
    rule = "kind=correction_email"
    policy = policies.propose(incident=incident, rule=rule, decision="reject", actor=author, reason="resend by hand",
                              via="cli")
    previewed = set(policy.previewed)
    assert previewed == set(incident.compensation_items.filter(kind=K.CORRECTION_EMAIL).values_list("pk", flat=True))
    with pytest.raises(policies.PolicyRefused, match="four-eyes"):
        policies.apply(policy=policy, actor=author, reason="mine", via="cli")
    # Decided by hand meanwhile: no longer pending, so the policy skips it.
    by_hand = incident.compensation_items.get(pk=min(previewed))
    reject_item(item=by_hand, actor=applier, reason="by hand", via="admin")
    outcome = policies.apply(policy=policy, actor=applier, reason="agreed", via="cli")
    assert outcome["decided"] == len(previewed) - 1 and outcome["skipped"] == 1 and not outcome["refusals"]
    decided = set(AuditEvent.objects.filter(action="item.rejected", data__policy=policy.pk)
                  .values_list("subject_id", flat=True))
    assert decided == {str(pk) for pk in previewed - {by_hand.pk}}
    assert incident.compensation_items.filter(status=St.REJECTED).count() == len(previewed)
    assert AuditEvent.objects.filter(action="policy.applied", subject_id=str(policy.pk), actor=applier).exists()
    with pytest.raises(policies.PolicyRefused, match="already applied"):
        policies.apply(policy=policy, actor=applier, reason="again", via="cli")


def test_a_policy_never_decides_what_its_author_could_not_decide_by_hand(canonical, make_user):
    incident, flagger = canonical.incident, canonical.people.lead_reviewer
    with pytest.raises(policies.PolicyRefused, match="four-eyes"):
        policies.propose(incident=incident, rule="kind=correction_email", decision="approve", actor=flagger,
                         reason="fast", via="cli")
    # A policy proposed by a reviewer cannot be applied by the flagger either.
    policy = policies.propose(incident=incident, rule="kind=correction_email", decision="approve",
                              actor=canonical.people.reviewer, reason="fine", via="cli")
    with pytest.raises(policies.PolicyRefused, match="flagged"):
        policies.apply(policy=policy, actor=flagger, reason="go", via="cli")
    assert not incident.compensation_items.exclude(status=St.PENDING).exists()


def test_the_command_proposes_then_applies(canonical, make_user):
    incident = canonical.incident
    applier = _second_reviewer(canonical, make_user)
    out = io.StringIO()
    call_command("review_policy", "--incident", incident.pk, "--rule", "kind=refund_reversal, amount<6000",
                 "--propose", "--user", canonical.people.reviewer.username, "--reason", "small ones", "--json", stdout=out)
    proposed = json.loads(out.getvalue())
    out = io.StringIO()
    call_command("review_policy", "--apply", "--policy", proposed["policy"], "--user", applier.username,
                 "--reason", "agreed", "--json", stdout=out)
    applied = json.loads(out.getvalue())
    assert applied["decided"] == proposed["items"] > 0
