"""OpenAI Agents SDK agents recorded by kintsugi: each `agents.Agent` is one kintsugi agent, run by the
SDK's own Runner inside a recorded action, and again, with the same payload, when a repair replays it.

    refund = Agent(name="refund", model=..., tools=[read_memory, effect_tool("refund")])
    triage = Agent(name="triage", model=..., tools=[read_memory, handoff_tool("refund")])
    desk = AgentDesk(Client(url, recording_token), [triage, refund], prefix="sdk_",
                     replay_secret={"sdk_triage": "krs_…", ...})  # each registration's secret
    desk.run_root("triage", {"ticket": "t01", ...})   # the payload is the run's input, as JSON
    desk.serve_replays("127.0.0.1", 9100)             # kintsugi re-runs one agent with its payload

Tools reach the action through the run's context (`RunContextWrapper[KintsugiContext]`):
`read_memory` / `write_memory` are kintsugi `get` / `set` (values as JSON text), `read_source` an
`ingest`, `effect_tool(kind)` an effect (performed by the desk only when kintsugi answers perform: true,
never in a replay), and your own tools call `recorder(ctx)`.

A handoff is a tool here (`handoff_tool("refund")`, named `transfer_to_refund` as the SDK names its
own): the SDK's handoffs move control inside one Runner run, while kintsugi records each agent as its
own action so that a repair re-runs only the one that has to. The target runs as its own Runner run on
this action's payload plus the tool's arguments.

The agent's final output is its recorded decision: a pydantic model or dict as it is, text that is a
JSON object parsed, other text as {"output": text}. Tracing is off in the runs (RunConfig).

`write_memory` and handoffs are held back by the recorder and sent with the action's next call that
needs an answer (kintsugi_client.recorder). A refusal of one of them ends the run at the next tool
that calls kintsugi, raised to your program as the KintsugiError: it is not handed to the model as a
tool's error text, since nothing of the action can be recorded past it. Other tool failures are told
to the model as the SDK tells them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, Runner, default_tool_error_function, function_tool

from kintsugi_client import Client, Desk, RemoteRecorder

__all__ = ["AgentDesk", "KintsugiContext", "effect_tool", "handoff_tool", "read_memory", "read_source",
           "recorder", "run_agent", "write_memory"]


@dataclass
class KintsugiContext:
    """The run's context: the action's recorder and the payload the agent was given."""
    rec: RemoteRecorder
    payload: dict
    prefix: str = ""  # of the kintsugi names of the desk's agents, for handoffs


def recorder(ctx: RunContextWrapper[KintsugiContext]) -> RemoteRecorder:
    """The recorder of the kintsugi action a tool runs in."""
    if not isinstance(ctx.context, KintsugiContext):
        raise RuntimeError("no kintsugi action is running: run the agent through AgentDesk or run_agent")
    return ctx.context.rec


def _refusal_ends_the_run(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """A kintsugi tool's failure: the refusal of a call the recorder held back is raised out of the run;
    anything else is told to the model as the SDK's default tells it."""
    rec = ctx.context.rec if isinstance(ctx.context, KintsugiContext) else None
    if rec is not None and rec.failure is not None:
        raise rec.failure
    return default_tool_error_function(ctx, error)


@function_tool(failure_error_function=_refusal_ends_the_run)
def read_memory(ctx: RunContextWrapper[KintsugiContext], key: str) -> str:
    """Read a fact from the desk's memory; its value as JSON, null if there is none.

    Args:
        key: the memory key, such as policy/refunds.
    """
    return json.dumps(recorder(ctx).get(key))


@function_tool(failure_error_function=_refusal_ends_the_run)
def write_memory(ctx: RunContextWrapper[KintsugiContext], key: str, value: str) -> str:
    """Write a fact to the desk's memory.

    Args:
        key: the memory key, such as policy/refunds.
        value: the value: JSON text is stored as what it encodes, other text as the text.
    """
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    recorder(ctx).set(key, parsed)
    return "written"


@function_tool(failure_error_function=_refusal_ends_the_run)
def read_source(ctx: RunContextWrapper[KintsugiContext], source_id: str) -> str:
    """Read a source document (a policy page, a note); empty if it is unknown or quarantined.

    Args:
        source_id: the source's id, such as kb/refund-policy.
    """
    return recorder(ctx).ingest(source_id) or ""


def _tool(name: str, description: str, properties: dict, invoke) -> FunctionTool:
    async def on_invoke(ctx: RunContextWrapper[KintsugiContext], arguments: str) -> str:
        recorder(ctx)
        return json.dumps(invoke(ctx.context, json.loads(arguments or "{}")))
    schema = {"type": "object", "properties": properties, "required": sorted(properties),
              "additionalProperties": False}
    return FunctionTool(name=name, description=description, params_json_schema=schema, on_invoke_tool=on_invoke)


def effect_tool(kind: str, *, description: str | None = None, currency: str = "USD",
                external: bool | None = None) -> FunctionTool:
    """A tool `kind(ticket, amount_cents)` that records an effect of that kind before it leaves; the
    idempotency key is kind-ticket-amount, so a re-run with the same amount is the same effect.
    `external`: its tickets are not the workspace's desk tickets."""
    def invoke(run: KintsugiContext, args: dict) -> dict:
        amount, ticket = args["amount_cents"], args["ticket"]
        answer = run.rec.effect(kind, amount=amount, ticket=ticket, currency=run.payload.get("currency", currency),
                            idempotency_key=f"{kind}-{ticket}-{amount}", external=external)
        return {"recorded": True, "perform": answer.get("perform", False)}
    return _tool(kind, description or f"Record a {kind} for a ticket (it is performed after review if held).",
                 {"ticket": {"type": "string"}, "amount_cents": {"type": "integer"}}, invoke)


def handoff_tool(target: str, *, description: str | None = None, fields: dict | None = None) -> FunctionTool:
    """A tool `transfer_to_<target>` that hands the ticket to the desk's agent `target`, with this
    action's payload plus the tool's arguments (`fields`: their JSON schemas by name)."""
    def invoke(run: KintsugiContext, args: dict) -> dict:
        run.rec.handoff(run.prefix + target, {**run.payload, **args})
        return {"handed_to": target}
    return _tool(f"transfer_to_{target}", description or f"Hand this ticket to the {target} agent.",
                 dict(fields or {}), invoke)


def _decision(output: Any) -> dict:
    if hasattr(output, "model_dump"):
        return output.model_dump(mode="json")
    if isinstance(output, dict):
        return output
    if isinstance(output, str):
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"output": output if isinstance(output, str) else json.dumps(output)}


def run_agent(agent: Agent, rec: RemoteRecorder, payload: dict, *, run_config: RunConfig | None = None,
              max_turns: int = 10, prefix: str = "") -> dict:
    """Run `agent` with the SDK's Runner inside the action `rec` records; its decision. The input is
    the payload as JSON. Blocking: call it from a thread without a running event loop."""
    try:
        result = Runner.run_sync(agent, json.dumps(payload), context=KintsugiContext(rec, payload, prefix),
                                 max_turns=max_turns, run_config=run_config or RunConfig(tracing_disabled=True))
    except Exception as exc:
        if rec.failure is None or exc is rec.failure:
            raise
        raise rec.failure from exc  # the SDK wraps a tool's exception; the refusal is what went wrong
    return _decision(result.final_output)


class AgentDesk(Desk):
    """A kintsugi Desk whose agents are Agents SDK agents, named `prefix + agent.name`."""

    def __init__(self, client: Client, agents: list[Agent], *, prefix: str = "", run_config: RunConfig | None = None,
                 max_turns: int = 10, **desk_options: Any):
        super().__init__(client, **desk_options)
        self.prefix = prefix
        for sdk_agent in agents:
            self.agents[prefix + sdk_agent.name] = self._agent(sdk_agent, run_config, max_turns)

    def _agent(self, sdk_agent: Agent, run_config: RunConfig | None, max_turns: int):
        def agent(rec: RemoteRecorder, payload: dict) -> dict:
            return run_agent(sdk_agent, rec, payload, run_config=run_config, max_turns=max_turns, prefix=self.prefix)
        return agent

    def run_root(self, agent: str, payload: dict) -> list[int]:
        """Record a root action of `agent` (its SDK name or kintsugi name) and, depth first, its handoffs."""
        return super().run_root(agent if agent in self.agents else self.prefix + agent, payload)
