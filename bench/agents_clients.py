"""The recording rate of kintsugi's client libraries and framework integrations, measured in the same run
as bench.agents' raw HTTP row, against the same server and workspace.

- `LangGraph GraphDesk`, `Agents SDK AgentDesk`: bench.agents' writer and reader (2 sets and a handoff;
  2 gets and an effect) written as a LangGraph graph with KintsugiStore, and as two Agents SDK agents
  with kintsugi's tools and a deterministic model (examples/agents_sdk_desk.py's DeskModel: no network);
- `TypeScript client Desk`: the same writer and reader in Node (clients/typescript/bench/record.mjs with
  KINTSUGI_READER), run with node when that script and node are here;
- `Python client, set+get roots`: one root that sets a fact and reads it back (2 ops, 4 requests call by
  call, record.mjs's other shape).
Each is measured call by call (the client's buffer 0) and with its background batching beside it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from typing import TypedDict

from bench import common

TS_SCRIPT = common.ROOT / "clients" / "typescript" / "bench" / "record.mjs"
AGENTS = {"langgraph": ("bench_lg_writer", "bench_lg_reader"), "agents_sdk": ("bench_sdk_writer", "bench_sdk_reader"),
          "py_setget": ("bench_py_setget",), "ts_desk": ("bench_ts_writer", "bench_ts_reader")}


class _State(TypedDict, total=False):
    n: int
    ticket: str


def _langgraph_desk(client):
    from langgraph.graph import START, StateGraph
    from langgraph.types import Command

    from kintsugi_client.langgraph import GraphDesk, KintsugiStore, recorder

    def writer(state: _State, runtime) -> Command:
        runtime.store.put(("faq",), str(state["n"]), {"answer": f"answer {state['n']}"})
        runtime.store.put(("bench",), "shared", {"n": state["n"]})
        return Command(goto="reader", update={"ticket": f"t{state['n']}"})

    def reader(state: _State, runtime) -> dict:
        runtime.store.get(("faq",), str(state["n"]))
        runtime.store.get(("bench",), "shared")
        recorder().effect("note", amount=0, ticket=state["ticket"], external=True)
        return {}

    builder = StateGraph(_State)
    builder.add_node("writer", writer)
    builder.add_node("reader", reader)
    builder.add_edge(START, "writer")
    return GraphDesk(client, builder.compile(store=KintsugiStore()), prefix="bench_lg_")


def _agents_sdk_desk(client):
    from agents import Agent

    from kintsugi_client.agents_sdk import AgentDesk, effect_tool, handoff_tool, read_memory, write_memory

    spec = importlib.util.spec_from_file_location("bench_agents_sdk_desk", common.ROOT / "examples" / "agents_sdk_desk.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    def writer(p: dict, results: dict):
        if "transfer_to_reader" in results:
            return {"n": p["n"]}
        return [("write_memory", {"key": f"faq/{p['n']}", "value": f"answer {p['n']}"}),
                ("write_memory", {"key": "shared", "value": str(p["n"])}),
                ("transfer_to_reader", {"ticket": f"t{p['n']}"})]

    def reader(p: dict, results: dict):
        if "note" in results:
            return {"read": True}
        return [("read_memory", {"key": f"faq/{p['n']}"}), ("read_memory", {"key": "shared"}),
                ("note", {"ticket": p["ticket"], "amount_cents": 0})]

    agents = [Agent(name="writer", model=example.DeskModel(writer),
                    tools=[write_memory, handoff_tool("reader", fields={"ticket": {"type": "string"}})]),
              Agent(name="reader", model=example.DeskModel(reader), tools=[read_memory, effect_tool("note", external=True)])]
    return AgentDesk(client, agents, prefix="bench_sdk_")


def _setget_desk(client):
    from kintsugi_client import Desk

    desk = Desk(client)

    @desk.agent(AGENTS["py_setget"][0])
    def setget(rec, p):
        rec.set(f"bench/{p['n']}", f"answer {p['n']}")
        rec.get(f"bench/{p['n']}")
        return {"n": p["n"]}

    return desk


def _timed(desk, agent: str, roots: int, server_cpu=lambda: 0.0) -> tuple[float, float]:
    """Seconds for `roots` roots, and the server's CPU seconds over them."""
    desk.run_root(agent, {"n": -1})  # imports and first connections, outside the clock
    t0, cpu0 = time.perf_counter(), server_cpu()
    for n in range(roots):
        desk.run_root(agent, {"n": n})
    return time.perf_counter() - t0, server_cpu() - cpu0


def _typescript(base: str, key: str, roots: int, *, buffer: int = 0) -> tuple[float | None, str]:
    node, script = shutil.which("node"), os.path.relpath(TS_SCRIPT, common.ROOT)
    if not TS_SCRIPT.exists() or not node:
        return None, f"TypeScript: no row (no {script if not TS_SCRIPT.exists() else 'node'})"
    env = dict(os.environ, KINTSUGI_URL=base, KINTSUGI_TOKEN=key, KINTSUGI_AGENT=AGENTS["ts_desk"][0],
               KINTSUGI_READER=AGENTS["ts_desk"][1], KINTSUGI_BUFFER=str(buffer))
    done = subprocess.run([node, str(TS_SCRIPT), str(roots)], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, f"TypeScript: record.mjs failed: {done.stderr.strip()[-200:]}"
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return float(answer["seconds"]), f"TypeScript: node {script} {roots}"


def run(*, base: str, key: str, roots: int, ops_per_root: int, base_ops_per_s: float,
        server_cpu=lambda: 0.0) -> tuple[list[list], list[str], dict]:
    """Rows for bench.agents' table ([label, roots, ops, seconds, ops/s, x record_root, target, server CPU
    ms/op]), its notes, and the numbers. The integrations' agents must be registered in the workspace of
    `key` (AGENTS). `server_cpu`: the web workers' CPU seconds so far."""
    from kintsugi_client import Client

    rows, notes, out = [], [], {}
    # Each integration call by call (`<name>_s`) and with the client's background batching beside it
    # (`<name>_batched_s`: set and handoff held back and sent with the next call that needs an answer).
    for label, name, make, agent, ops in (
            ("LangGraph GraphDesk", "langgraph", _langgraph_desk, "writer", ops_per_root),
            ("Agents SDK AgentDesk", "agents_sdk", _agents_sdk_desk, "writer", ops_per_root),
            ("Python client, set+get roots", "py_setget", _setget_desk, AGENTS["py_setget"][0], 2)):
        for mode, suffix, client in (("call by call", "", Client(base, key, buffer=0)),
                                     ("batching", "_batched", Client(base, key))):
            seconds, cpu = _timed(make(client), agent, roots, server_cpu)
            out[f"{name}{suffix}_s"] = seconds
            cpu_ms = cpu * 1000 / (roots * ops)
            common.log(f"{label}, {mode}: {seconds:.1f}s")
            rows.append([f"{label}, {mode}", roots, roots * ops, seconds, roots * ops / seconds,
                         roots * ops / seconds / base_ops_per_s, "", cpu_ms])
    for mode, suffix, buffer in (("call by call", "", 0), ("batching", "_batched", 64)):
        cpu0 = server_cpu()
        seconds, note = _typescript(base, key, roots, buffer=buffer)
        if not seconds:
            notes.append(note)
            break
        notes.append(f"{note} (KINTSUGI_READER: writer and reader; KINTSUGI_BUFFER={buffer})")
        out[f"ts_desk{suffix}_s"] = seconds
        ops = roots * ops_per_root
        rows.append([f"TypeScript client Desk, {mode}", roots, ops, seconds, ops / seconds,
                     ops / seconds / base_ops_per_s, "", (server_cpu() - cpu0) * 1000 / ops])
    return rows, notes, out
