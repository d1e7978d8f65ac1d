"""The event registry (core.audit.actions): every audit action declares its subject type and data keys, and
the trail refuses what the registry does not declare before anything is written."""
from __future__ import annotations

import pytest

from core.audit import actions, trail
from core.audit.event import AuditEvent
from core.vocabulary import AuditAction, Via

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action", AuditAction.values)
def test_every_audit_action_is_declared_with_its_subject_and_keys(action):
    spec = actions.EVENTS[action]
    assert spec.subject_type and spec.action == action
    assert all(isinstance(key, str) and key for key in spec.keys)
    # What it declares, it accepts.
    actions.check(action, subject_type=spec.subject_type if spec.subject_type != actions.ANY_SUBJECT else "api",
                  data=dict.fromkeys(spec.keys))


def test_an_action_nobody_declared_is_refused_and_nothing_is_written():
    before = AuditEvent.objects.count()
    with pytest.raises(actions.EventRefused, match="'item.teleported' is not declared"):
        trail.record(action="item.teleported", subject_type="compensation_item", subject_id=1, via=Via.CLI)
    assert AuditEvent.objects.count() == before


def test_a_data_key_the_action_does_not_declare_is_refused():
    with pytest.raises(actions.EventRefused, match="does not declare the data key.s. amount"):
        trail.record(action=AuditAction.ITEM_REJECTED, subject_type="compensation_item", subject_id=1, via=Via.CLI,
                     data={"policy": 3, "amount": 100})


def test_a_subject_of_another_type_is_refused():
    with pytest.raises(actions.EventRefused, match="speaks of a 'compensation_item', not a 'incident'"):
        trail.record(action=AuditAction.ITEM_CANCELLED, subject_type="incident", subject_id=1, via=Via.CLI)


def test_a_refusal_may_name_any_subject_and_every_batch_is_checked_whole():
    actions.check(AuditAction.REFUSED, subject_type="agent-registrations", data={"attempted": "x"})
    good = dict(action=AuditAction.ITEM_CANCELLED, subject_type="compensation_item", subject_id=1, via=Via.CLI)
    bad = dict(good, data={"why": "a key nobody declared"})
    before = AuditEvent.objects.count()
    with pytest.raises(actions.EventRefused):
        trail.record_many([good, bad], workspace=None)
    assert AuditEvent.objects.count() == before
