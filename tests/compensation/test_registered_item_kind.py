"""A review item kind of a team's own, registered from here alone: taking back a store credit. Its one spec
says everything about it (moves money, editable fields, wording, order in its case, the connector that
delivers it), and drafting, review and delivery follow it without any list of kinds being edited; a kind
nobody registered fails loudly instead of falling back to an order or a connector."""
from __future__ import annotations

import pytest

from compensation.drafting import effect_kinds, kinds
from compensation.delivery.connectors import Connector, Outcome, config, register, unregister
from compensation.drafting.netting import PlannedItem
from compensation.drafting.drafts import write_draft
from compensation.delivery.execution import execute_item
from compensation.models import CompensationItem
from compensation.review.services import DecisionRefused, approve_item
from compensation.drafting.validation import money_draft_problems
from core.money import format_money
from provenance.models import LedgerEntry
from tests.compensation.test_effect_kinds import goodwill_desk, repaired

pytestmark = pytest.mark.django_db
St = CompensationItem.Status
TAKE_BACK = "store_credit_reversal"


@pytest.fixture
def store_credit():
    granted, taken_back = [], []

    def grant(ws, run_number, batch):  # the shop's API would be called here
        granted.extend(row["ticket"] for row, _details, _key in batch)

    class ShopCredit(Connector):  # the shop's own way out: a connector, registered like every other
        name, label, kinds = "shop_credit", "the shop's credit API", {TAKE_BACK}
        schema = {}

        def send(self, item, options):  # idempotent through the item's execution key, like every connector
            if item.execution_key not in {key for key, _ in taken_back}:
                taken_back.append((item.execution_key, item.amount_cents))
            return Outcome("delivered", reference=f"shop-{item.execution_key}")

    def words(planned, facts, effect_kinds_of_workspace):  # the kind's own wording, from its spec
        return kinds.Written({"to": facts["customer_email"], "subject": "", "amount_cents": planned.amount_cents,
                              "currency": planned.currency, "payment_reference": facts["payment_reference"],
                              "body": f"Take back the {format_money(planned.amount_cents, planned.currency)} store "
                                      f"credit granted on ticket {planned.ticket} under a fake promotion."},
                             "kintsugi (store credit)")

    kinds.register_item_kind(kinds.ItemKind(
        TAKE_BACK, "whether the store credit is taken back (you may lower the amount)", money_draft_problems,
        order=5, connector="shop_credit", editable=("amount_cents", "body"), moves_money=True,
        compensates=True, words=words))
    register(ShopCredit())
    effect_kinds.register(effect_kinds.EffectKind("store_credit", grant, TAKE_BACK, TAKE_BACK, money=True))
    try:
        yield granted, taken_back
    finally:
        effect_kinds.unregister("store_credit")
        unregister("shop_credit")
        kinds.unregister_item_kind(TAKE_BACK)


def test_a_kind_registered_here_is_drafted_reviewed_and_delivered_by_its_spec(store_credit, people, settings):
    granted, taken_back = store_credit
    # Every list of kinds reads the spec: nothing else was edited.
    assert TAKE_BACK in kinds.MONEY and TAKE_BACK in kinds.COMPENSATING
    assert TAKE_BACK not in kinds.MESSAGES
    assert kinds.spec(TAKE_BACK).editable == ("amount_cents", "body") and kinds.spec(TAKE_BACK).order == 5
    assert config.defaults()[TAKE_BACK] == "shop_credit"

    ws = goodwill_desk(people, tickets=("g1", "g2"))
    assert sorted(granted) == ["g1", "g2"]  # dispatched live by its registration
    incident = repaired(ws, people, settings)
    item = incident.compensation_items.get(ticket_id="g1", kind=TAKE_BACK)
    assert item.valid and item.moves_money and item.amount_cents == 2000, item.problems
    assert "Take back the $20.00 store credit granted on ticket g1" in item.body
    assert incident.compensation_items.filter(kind=CompensationItem.Kind.MANUAL_COMPENSATION).count() == 0

    # Review: money first in its case (order 0..5), the reviewer may lower the amount, never raise it.
    with pytest.raises(DecisionRefused):
        approve_item(item=item, actor=people.reviewer, via="admin", edits={"amount_cents": 2500})
    approve_item(item=item, actor=people.reviewer, via="admin", reason="promo was fake",
                 edits={"amount_cents": 1500})

    # Delivery: the connector the spec names (the shop's own, registered above) delivers it.
    done = execute_item(item_id=item.pk)
    assert done.status == St.EXECUTED
    assert taken_back == [(done.execution_key, 1500)] and done.amount_cents == 1500
    assert not LedgerEntry.objects.filter(workspace=ws, kind=LedgerEntry.Kind.REVERSAL_REQUEST).exists()


def test_a_kind_nobody_registered_fails_loudly_where_a_decision_about_it_is_asked():
    with pytest.raises(kinds.UnknownKind, match="gift_card"):
        kinds.spec("gift_card")
    with pytest.raises(kinds.UnknownKind, match="gift_card"):
        write_draft(PlannedItem("gift_card", "t1", 0, "USD"), {})  # no words to fall back to
    with pytest.raises(kinds.UnknownKind, match="gift_card"):
        config.choice(workspace_id=0, kind="gift_card")
    assert "gift_card" not in kinds.MONEY and "gift_card" not in config.defaults()


def test_a_kind_registered_without_its_words_is_refused():
    with pytest.raises(ValueError, match="needs its words"):
        kinds.ItemKind("gift_card", "whether the gift card is taken back", money_draft_problems, order=6,
                       connector="sandbox_ledger")
