"""Deciding many cases at once (compensation.review.decisions): one short transaction per batch under the
workspace's audit-chain lock, the same outcome and record as deciding the items one by one, and a refusal
that undoes none of the batch's other decisions."""
from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from compensation.models import AuditEvent, CompensationItem
from compensation.review import cases as case_selectors
from compensation.review.case_decisions import decide_cases
from compensation.review.services import approve_item, reject_item
from core.audit import verification

pytestmark = pytest.mark.django_db
K, St = CompensationItem.Kind, CompensationItem.Status


def _cases(incident, user):
    return case_selectors.cases(user=user, incident=incident)


def _statements_under_the_lock(cases, user) -> int:
    """Statements sent from the chain's first lock to the end of the batch (the lock is held to commit)."""
    with CaptureQueriesContext(connection) as queries:
        decide_cases(cases=cases, actor=user, decision="approve", reason="checked", via="cli")
    sql = [q["sql"] for q in queries.captured_queries]
    first = next(i for i, s in enumerate(sql) if "pg_advisory_xact_lock" in s)
    return len(sql) - first


def test_a_batch_holds_the_chain_lock_for_the_same_few_statements_whatever_its_size(canonical):
    reviewer = canonical.people.reviewer
    found = _cases(canonical.incident, reviewer)
    one, four = _statements_under_the_lock(found[:1], reviewer), _statements_under_the_lock(found[1:], reviewer)
    # The red case: decided item by item, each of the batch's 8 items took the lock for ~10 statements.
    assert one == four <= 10, (one, four)
    assert not canonical.incident.compensation_items.filter(status=St.PENDING, valid=True).exists()


def _outcome(incident, before: set) -> tuple[dict, list]:
    items = {i.ticket_id + ":" + i.kind: (i.status, i.valid, sorted(i.problems), i.decision_reason, i.approved_hash,
                                          i.execution_key) for i in incident.compensation_items.all()}
    events = [(e.action, e.subject_id and CompensationItem.objects.get(pk=int(e.subject_id)).kind, e.from_status,
               e.to_status, {k: v for k, v in e.data.items() if k != "content_hash"})
              for e in AuditEvent.objects.filter(incident_id=incident.pk, subject_type="compensation_item",
                                                 action__startswith="item.").exclude(pk__in=before).order_by("seq")]
    return items, events


def test_a_batch_decides_and_records_as_deciding_item_by_item_would(canonical):
    """Approving t04's money item before its email lets the email go straight out; rejecting t05's money item
    marks its email, which the reason then rejects too: the same in one batch as item by item."""
    incident, reviewer = canonical.incident, canonical.people.reviewer
    before = set(AuditEvent.objects.filter(incident_id=incident.pk).values_list("pk", flat=True))
    plan = {"t04": "approve", "t06": "approve", "t05": "reject", "t07": "reject"}

    def by_batch():
        found = {c.ticket: c for c in _cases(incident, reviewer)}
        for decision in ("approve", "reject"):
            decide_cases(cases=[found[t] for t, d in plan.items() if d == decision], actor=reviewer,
                         decision=decision, reason="checked", via="cli")

    def item_by_item():
        found = {c.ticket: c for c in _cases(incident, reviewer)}
        for decision, decide in (("approve", approve_item), ("reject", reject_item)):
            for entry in (e for t, d in plan.items() if d == decision for e in found[t].pending):
                fresh = CompensationItem.objects.get(pk=entry.item.pk)
                if fresh.status == St.PENDING:
                    decide(item=fresh, actor=reviewer, reason="checked", via="cli")

    seen = []
    for run in (by_batch, item_by_item):
        with transaction.atomic():
            run()
            seen.append(_outcome(incident, before))
            transaction.set_rollback(True)
    assert seen[0] == seen[1]
    items, events = seen[0]
    assert items["t04:correction_email"][0] == St.APPROVED
    approved_email = [e for e in events if e[0] == "item.approved" and e[1] == K.CORRECTION_EMAIL]
    assert approved_email and all(e[4]["waits_for"] is None for e in approved_email)  # its money went first
    assert items["t05:correction_email"][:2] == (St.REJECTED, False)
    assert [e[0] for e in events if e[0] == "item.needs_redraft"] == ["item.needs_redraft"] * 2
    assert not AuditEvent.objects.filter(incident_id=incident.pk).exclude(pk__in=before).exists()


def test_a_refused_item_undoes_none_of_the_batch_and_is_recorded(canonical):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    found = _cases(incident, reviewer)
    taken = found[1].pending[0].item
    # Decided in another tab after the page was built: the batch still carries it as pending.
    reject_item(item=taken, actor=reviewer, reason="decided elsewhere", via="cli")
    results = decide_cases(cases=found, actor=reviewer, decision="approve", reason="checked", via="cli")
    refused = [(item.pk, why) for r in results for item, why in r.refused]
    assert (taken.pk, f"item #{taken.pk} is already rejected") in refused
    assert sum(len(r.decided) for r in results) == incident.compensation_items.filter(status=St.APPROVED).count() > 0
    refusal = AuditEvent.objects.get(incident_id=incident.pk, action="item.refused", subject_id=str(taken.pk))
    assert refusal.data == {"attempted": "approve", "refusal": "DecisionRefused"}


def test_the_chain_holds_after_batches(canonical):
    reviewer = canonical.people.reviewer
    found = _cases(canonical.incident, reviewer)
    decide_cases(cases=found[:2], actor=reviewer, decision="reject", reason="by phone", via="cli")
    decide_cases(cases=found[2:], actor=reviewer, decision="approve", reason="checked", via="cli")
    assert all(s.holds for s in verification.verify_all(workspace_ids=[canonical.incident.workspace_id]))
