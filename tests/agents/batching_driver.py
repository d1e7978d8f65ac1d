"""One of kintsugi's Python clients or framework integrations, run in a process of its own for the batching
contract (tests/agents/test_batching_contract.py; the TypeScript client's twin is batching_driver.mjs).

    python tests/agents/batching_driver.py KIND MODE BASE_URL TOKEN BUFFER SCRIPT [--variant WHAT]

KIND: python (kintsugi_client.Desk), langgraph (GraphDesk, the calls made by a node through its store) or
agents_sdk (AgentDesk, the calls made by the model's tool calls). SCRIPT: JSON, the agent `bc_writer`'s
calls in order, each ["set", k] (the fact bc/<k> = {"v": k}) or ["get", k]; k "BAD" names a key kintsugi
refuses (longer than a fact key may be) and the client lets through. MODE: root (the desk records a root
of bc_writer and finishes it) or exit (an action is opened, the agent runs on it, and the process ends
without finishing it: what it held back is left to the client's exit). WHAT breaks the client on
purpose, for the contract's red cases: drop-at-exit (the exit handler is gone) or no-backpressure (a full
buffer is queued without waiting for the batch before it).

Prints JSON lines: {"done": n} after the agent's n-th call returned, {"got": value} for each read, then
{"ids": [...]} or {"error": {...}} (root), or {"action": id} (exit).
"""
import atexit
import importlib.util
import json
import sys
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kintsugi_client import Client, Desk, KintsugiError, RemoteRecorder  # noqa: E402
from kintsugi_client import recorder as recorder_module  # noqa: E402

AGENT, PREFIX, NODE = "bc_writer", "bc_", "writer"
BAD = "k" * 250


def say(**line) -> None:
    print(json.dumps(line), flush=True)


def key_part(k: str) -> str:
    return BAD if k == "BAD" else k


def memory_key(k: str) -> str:
    return f"bc/{key_part(k)}"


def python_desk(client: Client, script: list) -> Desk:
    desk = Desk(client)

    @desk.agent(AGENT)
    def writer(rec, payload):
        for n, (op, k) in enumerate(script, 1):
            if op == "set":
                rec.set(memory_key(k), {"v": k})
            else:
                say(got=rec.get(memory_key(k)))
            say(done=n)
        return {"ops": len(script)}

    return desk


class State(TypedDict, total=False):
    ops: int


def langgraph_desk(client: Client, script: list):
    from langgraph.graph import START, StateGraph

    from kintsugi_client.langgraph import GraphDesk, KintsugiStore

    def writer(state: State, runtime) -> dict:
        for n, (op, k) in enumerate(script, 1):
            if op == "set":
                runtime.store.put(("bc",), key_part(k), {"v": k})
            else:
                item = runtime.store.get(("bc",), key_part(k))
                say(got=item.value if item else None)
            say(done=n)
        return {"ops": len(script)}

    builder = StateGraph(State)
    builder.add_node(NODE, writer)
    builder.add_edge(START, NODE)
    return GraphDesk(client, builder.compile(store=KintsugiStore()), prefix=PREFIX)


def agents_sdk_desk(client: Client, script: list):
    from agents import Agent

    from kintsugi_client.agents_sdk import AgentDesk, read_memory, write_memory

    spec = importlib.util.spec_from_file_location("bc_agents_sdk_desk", ROOT / "examples" / "agents_sdk_desk.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    told = [0]  # DeskModel walks the steps again every turn: each call is told once

    def step(payload: dict, results: dict):
        done = sum(len(outputs) for outputs in results.values())
        for n in range(told[0], done):
            if script[n][0] == "get":
                text = results["read_memory"][sum(1 for op, _ in script[:n] if op == "get")]
                try:
                    say(got=json.loads(text))
                except ValueError:  # the SDK's text for a failed tool: the model was told, the program not
                    say(got=text)
            say(done=n + 1)
        told[0] = max(told[0], done)
        if done == len(script):
            return {"ops": done}
        op, k = script[done]
        if op == "set":
            return [("write_memory", {"key": memory_key(k), "value": json.dumps({"v": k})})]
        return [("read_memory", {"key": memory_key(k)})]

    agent = Agent(name=NODE, instructions="Write and read the desk's memory as told.", model=example.DeskModel(step),
                  tools=[read_memory, write_memory])
    return AgentDesk(client, [agent], prefix=PREFIX)


def _hold_without_backpressure(self, op, body):
    # Broken on purpose: a full buffer goes to the sender's queue without waiting for the batch in flight,
    # so nothing bounds what the agent has made and kintsugi has not yet taken.
    with self._lock:
        self._held.append({"op": op, **body})
        if len(self._held) >= self._limit:
            held, self._held = self._held, []
            self._sending = self._client.sender().submit(self._send, held)


def _refusal(exc: BaseException) -> KintsugiError | None:
    while exc is not None and not isinstance(exc, KintsugiError):
        exc = exc.__cause__ or exc.__context__
    return exc


def main() -> None:
    kind, mode, base, token, buffer, script = sys.argv[1:7]
    variant = sys.argv[8] if sys.argv[7:8] == ["--variant"] else None
    script = json.loads(script)
    if variant == "no-backpressure":
        RemoteRecorder._hold = _hold_without_backpressure
    client = Client(base, token, buffer=int(buffer))
    desk = {"python": python_desk, "langgraph": langgraph_desk, "agents_sdk": agents_sdk_desk}[kind](client, script)
    payload = {"ops": 0}
    if mode == "root":
        try:
            say(ids=desk.run_root(AGENT, payload))
        except Exception as exc:  # noqa: BLE001  (the contract asks what surfaced, and where)
            refusal = _refusal(exc)
            say(error={"type": type(exc).__name__, "status": getattr(refusal, "status", None),
                       "details": getattr(refusal, "details", None)})
        return
    opened = client.open_action(AGENT, payload)
    desk.agents[AGENT](RemoteRecorder(client, opened["action"], payload), payload)
    say(action=opened["action"])
    if variant == "drop-at-exit":
        atexit.unregister(recorder_module._send_what_is_held)


if __name__ == "__main__":
    main()
