"""The what-if is the exact repair outcome: computed before a flag, it equals what the real repair then
does (counts, invalidated effects, compensation items and amounts), and it changes nothing."""
from collections import Counter

import pytest

from compensation.models import AuditEvent, CompensationItem
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import LedgerEntry, OutboxEmail, Workspace
from provenance.recording.recorder import UnknownSource
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run
from repairs.models import ActionOutcome, Incident, RepairEffect
from repairs.services import incident_summary
from repairs.what_if import WHAT_IF_KEYS, desk_fingerprint, what_if
from tests.helpers import flagger, graph_dump, repair

pytestmark = pytest.mark.django_db(transaction=True)


def _rows() -> dict:
    return {m.__name__: m.objects.count() for m in (Incident, ActionOutcome, RepairEffect, CompensationItem,
                                                     LedgerEntry, OutboxEmail)}


def _what_if(name: str, source: str):
    return what_if(workspace=Workspace.objects.get(name=name), source=source, actor=flagger(), via="cli")


@pytest.mark.parametrize("tickets,seed,page", [(None, 0, POISONED_PAGE), (300, 11, POISONED_PAGE),
                                               (300, 12, "acme/vip-program")])
def test_what_if_then_flag_gives_the_same_outcome_and_the_what_if_writes_nothing(tickets, seed, page):
    desk_run(workspace="wif", tickets=tickets, seed=seed)
    ws = Workspace.objects.get(name="wif")
    state, dump, rows, fingerprint = export_state(workspace="wif"), graph_dump("wif"), _rows(), desk_fingerprint(ws)
    events = AuditEvent.objects.count()

    wi = _what_if("wif", page)

    assert export_state(workspace="wif") == state
    assert graph_dump("wif") == dump
    assert _rows() == rows
    assert desk_fingerprint(ws) == fingerprint == wi.fingerprint
    assert list(AuditEvent.objects.order_by("pk").values_list("action", flat=True)[events:]) == ["what_if.viewed"]

    incident = repair("wif", page)
    assert incident.status == "repaired", incident.error
    real = incident_summary(incident)
    for key in ("source", "blast_radius", "counts", "effects_invalidated", "compensations"):
        assert wi.summary()[key] == real[key], key
    assert wi.effects_by_kind == dict(Counter(incident.effects.filter(role="invalidated").values_list("kind", flat=True)))
    items = CompensationItem.objects.filter(incident=incident)
    assert sorted((i.kind, i.ticket_id, i.amount_cents, i.currency, i.valid) for i in items) == sorted(
        (i["kind"], i["ticket"], i["amount_cents"], i["currency"], i["valid"]) for i in wi.items)
    reversed_ = Counter()
    for i in items.filter(kind="refund_reversal"):
        reversed_[i.currency] += i.amount_cents
    assert wi.amount_reversed == dict(reversed_)
    changed = {o.ticket for o in incident.outcomes.filter(status="rerun_changed")
               if "choice" in (o.before or {}) and o.before != o.after}
    assert {t["ticket"] for t in wi.tickets_changed} == changed


def test_canonical_what_if_tells_the_real_money_not_the_money_at_stake():
    desk_run(workspace="wic")
    wi = _what_if("wic", POISONED_PAGE)
    assert set(wi.summary()) == set(WHAT_IF_KEYS)
    assert wi.blast_radius == 25
    assert wi.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8, "new": 4}
    assert (wi.effects_invalidated, wi.compensations) == (10, 10)
    assert wi.amount_reversed == {"USD": 40000}  # not the 750.00 at stake: three genuine VIPs keep theirs
    assert [(t["ticket"], t["before"]["choice"], t["after"]["choice"]) for t in wi.tickets_changed] == [
        ("t04", "refund", "refund"), ("t05", "refund", "reply"), ("t06", "refund", "reply"),
        ("t07", "refund", "reply"), ("t08", "refund", "reply")]


def test_a_desk_changed_after_the_what_if_is_seen_and_gives_another_outcome():
    """Red test of the equality: the what-if of one desk does not describe the repair of another."""
    desk_run(workspace="wid")
    wi = _what_if("wid", POISONED_PAGE)
    desk_run(workspace="wid", tickets=48, seed=3)
    assert desk_fingerprint(Workspace.objects.get(name="wid")) != wi.fingerprint
    real = incident_summary(repair("wid", POISONED_PAGE))
    assert (wi.blast_radius, wi.counts) != (real["blast_radius"], real["counts"])


def test_a_what_if_of_an_unknown_source_fails_and_records_nothing():
    desk_run(workspace="wiu")
    events, dump = AuditEvent.objects.count(), graph_dump("wiu")
    with pytest.raises(UnknownSource):
        _what_if("wiu", "nowhere/page")
    with pytest.raises(ValueError):
        _what_if("wiu", "bad\x00source")
    assert AuditEvent.objects.count() == events
    assert graph_dump("wiu") == dump
