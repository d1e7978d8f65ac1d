"""The small desk (examples/small_desk.py) as a LangGraph graph recorded by kintsugi over HTTP.

    python examples/langgraph_desk.py --base-url URL --token TOKEN --workspace W --replay-port PORT

Three nodes, each a kintsugi agent (lg_research, lg_triage, lg_refund): research writes the policy to
the graph's store, triage reads it back with `store.search` and hands a refund over with
`Command(goto="refund")`, refund records the refund effect. Flag "kb/partner-note" and the repair
re-runs the nodes here, through the replay endpoint, with the state each one was recorded with.
"""
from __future__ import annotations

import os
import sys
from typing import TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.types import Command  # noqa: E402

import small_desk  # noqa: E402
from kintsugi_client.langgraph import GraphDesk, KintsugiStore, recorder  # noqa: E402

AGENTS = {"research": "lg_research", "triage": "lg_triage", "refund": "lg_refund"}
POLICY = ("policy",)


class Ticket(TypedDict, total=False):
    source: str
    ticket: str
    customer: str
    email: str
    body: str
    amount_cents: int
    currency: str
    tier: str
    choice: str
    level: str
    percent: int
    rules: list[str]
    refunded_cents: int


def research(state: Ticket, runtime: Runtime) -> dict:
    rules = small_desk.parse_rules(recorder().ingest(state["source"]))
    for topic, rule in rules.items():
        runtime.store.put(POLICY, topic, {"rule": rule})
    return {"rules": sorted(rules)}


def triage(state: Ticket, runtime: Runtime) -> Command:
    # Every policy rule the store knows, each read recorded: a repair of any of them reaches this ticket.
    rules = {item.key: item.value["rule"] for item in runtime.store.search(POLICY)}
    vip = rules.get("vip") if small_desk.says_vip(state["body"]) else None
    decision = small_desk.decide(state["body"], rules.get(small_desk.category(state["body"])), vip)
    return Command(goto="refund" if decision["choice"] == "refund" else END, update=decision)


def refund(state: Ticket) -> dict:
    amount = state["amount_cents"] * state["percent"] // 100
    recorder().effect("refund", amount=amount, ticket=state["ticket"], currency=state["currency"],
                      idempotency_key=f"refund-{state['ticket']}-{amount}", customer=state["email"])
    return {"refunded_cents": amount}


def route(state: Ticket) -> str:
    return "research" if "source" in state else "triage"


def build_graph():
    builder = StateGraph(Ticket)
    builder.add_node("research", research)
    builder.add_node("triage", triage)
    builder.add_node("refund", refund)
    builder.add_conditional_edges(START, route, ["research", "triage"])
    builder.add_edge("research", END)
    builder.add_edge("refund", END)
    known = [(POLICY, topic) for topic in ("damaged", "unopened", "change-of-mind", "vip")]
    return builder.compile(store=KintsugiStore(known_keys=known))


def build_desk(client, *, perform=None, replay_secret=None):
    """The desk; `replay_secret`: the agents' replay secrets by name (or one for all), to check replays."""
    return GraphDesk(client, build_graph(), prefix="lg_", perform=perform, replay_secret=replay_secret)


if __name__ == "__main__":
    sys.exit(small_desk.main(__doc__, build_desk, AGENTS))
