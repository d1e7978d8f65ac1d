"""The small desk (examples/small_desk.py) as OpenAI Agents SDK agents recorded by kintsugi over HTTP.

    python examples/agents_sdk_desk.py --base-url URL --token TOKEN --workspace W --replay-port PORT

Three `agents.Agent`s, each a kintsugi agent (sdk_research, sdk_triage, sdk_refund), run by the SDK's
Runner with kintsugi's tools. Their model is `DeskModel`, a deterministic stand-in written against the
SDK's Model interface: it picks each turn's tool calls from the input and the tool results so far, so
nothing leaves the machine. Swap it for a real model and the desk records the same way. Flag
"kb/partner-note" and the repair re-runs the agents here, through the replay endpoint.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agents import Agent, ModelResponse, set_tracing_disabled  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

import small_desk  # noqa: E402
from kintsugi_client.agents_sdk import (AgentDesk, effect_tool, handoff_tool, read_memory, read_source,  # noqa: E402
                                        write_memory)

set_tracing_disabled(True)
AGENTS = {"research": "sdk_research", "triage": "sdk_triage", "refund": "sdk_refund"}
# A step: (the payload, the tools' outputs so far, as text, by tool name) -> this turn's tool calls, or the final output.
Step = Callable[[dict, dict[str, list]], "list[tuple[str, dict]] | dict"]


class DeskModel(Model):
    """A deterministic model: `step` reads the run's input and tool results and answers like a model."""

    def __init__(self, step: Step):
        self.step = step

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        payload = json.loads(next(i["content"] for i in items if i.get("role") == "user"))
        made, outputs = [], {}
        for item in items:
            if item.get("type") == "function_call":
                made.append((item["call_id"], item["name"], json.loads(item["arguments"])))
            elif item.get("type") == "function_call_output":
                outputs[item["call_id"]] = item["output"]
        # Walk the steps again over the calls made so far and ask for the next call, one per turn: the
        # SDK runs the calls of one turn concurrently, and a recording is clearer in a fixed order.
        results: dict[str, list] = {}
        while True:
            step = self.step(payload, results)
            if isinstance(step, dict):
                text = ResponseOutputText(type="output_text", text=json.dumps(step), annotations=[])
                out = [ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed",
                                             content=[text])]
                break
            done = len(sum(results.values(), []))
            pending = [(name, args) for name, args in step]
            for name, args in pending:
                if done < len(made) and made[done][1:] == (name, args):
                    results.setdefault(name, []).append(outputs[made[done][0]])
                    done += 1
                    continue
                out = [ResponseFunctionToolCall(type="function_call", id=f"fc_{done}", call_id=f"call_{done}",
                                                name=name, arguments=json.dumps(args))]
                break
            else:
                continue
            break
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("DeskModel answers whole responses only")


def research_step(payload: dict, results: dict) -> list | dict:
    if "read_source" not in results:
        return [("read_source", {"source_id": payload["source"]})]
    rules = small_desk.parse_rules(results["read_source"][0])
    if rules and "write_memory" not in results:
        return [("write_memory", {"key": f"policy/{topic}", "value": rule}) for topic, rule in rules.items()]
    return {"rules": sorted(rules)}


def triage_step(payload: dict, results: dict) -> list | dict:
    vip = small_desk.says_vip(payload["body"])
    if "read_memory" not in results:
        keys = [f"policy/{small_desk.category(payload['body'])}"] + (["policy/vip"] if vip else [])
        return [("read_memory", {"key": key}) for key in keys]
    read = [json.loads(text) for text in results["read_memory"]]
    decision = small_desk.decide(payload["body"], read[0], read[1] if vip else None)
    if decision["choice"] == "refund" and "transfer_to_refund" not in results:
        return [("transfer_to_refund", {"percent": decision["percent"]})]
    return decision


def refund_step(payload: dict, results: dict) -> list | dict:
    amount = payload["amount_cents"] * payload["percent"] // 100
    if "refund" not in results:
        return [("refund", {"ticket": payload["ticket"], "amount_cents": amount})]
    return {"refunded_cents": amount}


def build_agents() -> list[Agent]:
    return [
        Agent(name="research", instructions="Read the source and write each policy rule to memory.",
              model=DeskModel(research_step), tools=[read_source, write_memory]),
        Agent(name="triage", instructions="Decide the ticket from the policy; hand refunds to the refund agent.",
              model=DeskModel(triage_step),
              tools=[read_memory, handoff_tool("refund", fields={"percent": {"type": "integer"}})]),
        Agent(name="refund", instructions="Refund the ticket by the percent you were given.",
              model=DeskModel(refund_step), tools=[effect_tool("refund")]),
    ]


def build_desk(client, *, perform=None, replay_secret=None):
    """The desk; `replay_secret`: the agents' replay secrets by name (or one for all), to check replays."""
    return AgentDesk(client, build_agents(), prefix="sdk_", perform=perform, replay_secret=replay_secret)


if __name__ == "__main__":
    sys.exit(small_desk.main(__doc__, build_desk, AGENTS))
