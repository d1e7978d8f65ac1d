"""LangGraph agents recorded by kintsugi: each node of a compiled graph is one agent, its store is
kintsugi's memory, and a repair re-runs exactly the node it has to, here, through the replay endpoint.

    store = KintsugiStore()
    graph = builder.compile(store=store)        # nodes: def triage(state, runtime): runtime.store.get(...)
    desk = GraphDesk(Client(url, recording_token), graph, prefix="lg_",
                     replay_secret={"lg_triage": "krs_…", ...})  # each registration's secret
    desk.invoke({"ticket": "t01", ...})         # recorded node by node, from START along the edges
    desk.serve_replays("127.0.0.1", 9100)       # kintsugi re-runs one node with its recorded state

Memory: `store.put(("policy",), "refunds", {"text": ...})` is a kintsugi `set` of the key
"policy/refunds" (the namespace's parts and the key joined by "/"; none of them may contain "/"), and
`store.get` a `get` of it, so the read is an edge in the provenance graph. The value is the item's
dict; `delete` writes None. Items carry no stored timestamps (kintsugi's memory keeps its own clocks):
`created_at`/`updated_at` are the time of the read. `search` lists what this action can honestly see
without a listing call in the protocol: keys it has read or written so far plus the keys given to
`KintsugiStore(known_keys=...)`, each read again through `get` (so recorded), filtered by equality on
the value's fields; a semantic `query` is refused.

Nodes reach the recorder for ingests and effects with `recorder()` (or `recorder(config)`):
`recorder().ingest("kb/policy")`, `recorder().effect("refund", amount=..., ticket=...)`.

How the desk runs a graph: kintsugi orders the actions (depth first along handoffs), so the desk runs
one node at a time through LangGraph itself (a one-node graph with the same state schema, reducers and
store) and hands the new state to the nodes that follow it: the `goto` of a returned `Command`, else
the node's conditional edges evaluated on the new state, else its plain edges. Limits: the state must be
JSON (no floats in what a node returns: its update, with "_next" the nodes it handed to, is its
recorded decision); nodes are sync functions; `Send` is not supported;
nodes that follow one node run one after another (depth first), not in one parallel superstep.
"""
from __future__ import annotations

import contextvars
import weakref
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (BaseStore, GetOp, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem,
                                  SearchOp)
from langgraph.types import Command, Send

from kintsugi_client import Client, Desk, RemoteRecorder

__all__ = ["GraphDesk", "KintsugiStore", "memory_key", "recorder"]

_CURRENT: contextvars.ContextVar[RemoteRecorder | None] = contextvars.ContextVar("kintsugi_recorder", default=None)
_STEP: contextvars.ContextVar[dict] = contextvars.ContextVar("kintsugi_graph_step")
CONFIG_KEY = "kintsugi_recorder"


def recorder(config: RunnableConfig | None = None) -> RemoteRecorder:
    """The recorder of the kintsugi action this node runs in (from `config` if given)."""
    rec = (config or {}).get("configurable", {}).get(CONFIG_KEY) or _CURRENT.get()
    if rec is None:
        raise RuntimeError("no kintsugi action is running: run the graph through GraphDesk")
    return rec


def memory_key(namespace: tuple[str, ...], key: str) -> str:
    """The kintsugi memory key of a store item: the namespace's parts and the key joined by '/'."""
    parts = (*namespace, key)
    if not parts or any(not p or "/" in p for p in parts):
        raise ValueError(f"namespace and key parts must be non-empty and free of '/': {parts!r}")
    return "/".join(parts)


def _split(mem_key: str) -> tuple[tuple[str, ...], str]:
    *namespace, key = mem_key.split("/")
    return tuple(namespace), key


class KintsugiStore(BaseStore):
    """A LangGraph store whose reads and writes are the current kintsugi action's memory calls."""

    def __init__(self, *, known_keys: Iterable[tuple[tuple[str, ...], str]] = ()):
        self.known = {memory_key(ns, key) for ns, key in known_keys}
        # Per action (its recorder, gone when the action is): the keys it has read or written.
        self._seen: weakref.WeakKeyDictionary[RemoteRecorder, set[str]] = weakref.WeakKeyDictionary()

    def _rec(self) -> RemoteRecorder:
        rec = recorder()
        self._seen.setdefault(rec, set())
        return rec

    def _item(self, mem_key: str, value: Any) -> Item | None:
        if value is None:
            return None
        if not isinstance(value, dict):  # a key written by a non-LangGraph agent: keep it readable
            value = {"value": value}
        now = datetime.now(timezone.utc)
        namespace, key = _split(mem_key)
        return Item(value=value, key=key, namespace=namespace, created_at=now, updated_at=now)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The ops in order; a put is sent in the background (the recorder holds it back), and a run of
        gets is one request (the several-calls form) with whatever puts were held before it."""
        rec, results, ops = self._rec(), [], list(ops)
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, GetOp):
                run = []
                while i < len(ops) and isinstance(ops[i], GetOp):
                    run.append(memory_key(ops[i].namespace, ops[i].key))
                    i += 1
                self._seen[rec].update(run)
                results += [self._item(k, v) for k, v in zip(run, rec.get_many(run))]
                continue
            i += 1
            if isinstance(op, PutOp):
                mem_key = memory_key(op.namespace, op.key)
                rec.set(mem_key, op.value)
                self._seen[rec].add(mem_key)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(rec, op))
            elif isinstance(op, ListNamespacesOp):
                spaces = sorted({_split(k)[0] for k in self._seen[rec] | self.known})
                results.append(spaces[op.offset:op.offset + op.limit])
            else:
                raise NotImplementedError(f"{type(op).__name__} is not supported by KintsugiStore")
        return results

    def _search(self, rec: RemoteRecorder, op: SearchOp) -> list[SearchItem]:
        if op.query:
            raise NotImplementedError("KintsugiStore has no semantic search: list keys by namespace instead")
        prefix = op.namespace_prefix
        found = []
        keys = [k for k in sorted(self._seen[rec] | self.known) if _split(k)[0][:len(prefix)] == tuple(prefix)]
        self._seen[rec].update(keys)
        for mem_key, value in zip(keys, rec.get_many(keys)):  # each read recorded, all in one request
            item = self._item(mem_key, value)
            if item and all(item.value.get(f) == v for f, v in (op.filter or {}).items()):
                found.append(SearchItem(namespace=item.namespace, key=item.key, value=item.value,
                                        created_at=item.created_at, updated_at=item.updated_at))
        return found[op.offset:op.offset + op.limit]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)  # the recorder's calls are blocking HTTP; an async node waits on them


class GraphDesk(Desk):
    """A kintsugi Desk whose agents are the nodes of a compiled StateGraph, named `prefix + node`."""

    def __init__(self, client: Client, graph: Any, *, prefix: str = "", **desk_options: Any):
        super().__init__(client, **desk_options)
        self.graph, self.prefix = graph, prefix
        builder = graph.builder
        for node in builder.nodes:
            self.agents[prefix + node] = self._node_agent(node, self._one_node_graph(node))

    def _one_node_graph(self, node: str) -> Any:
        spec = self.graph.builder.nodes[node]

        def run_node(state: dict, config: RunnableConfig) -> Any:
            out = spec.runnable.invoke(state, config)  # LangGraph injects runtime, store and config
            goto, update = (out.goto, out.update or {}) if isinstance(out, Command) else (None, out or {})
            _STEP.get().update(goto=goto, update=update)
            return update

        one = StateGraph(self.graph.builder.state_schema)
        one.add_node(node, run_node)
        one.add_edge(START, node)
        one.add_edge(node, END)
        return one.compile(store=self.graph.store)

    def _node_agent(self, node: str, one: Any):
        def agent(rec: RemoteRecorder, payload: dict) -> dict:
            # The node may run on LangGraph's own thread with a copy of this context: it fills the
            # same dict, and concurrent replays each have theirs.
            token, step_token = _CURRENT.set(rec), _STEP.set({})
            try:
                state = one.invoke(payload, {"configurable": {CONFIG_KEY: rec}})
                step = _STEP.get()
            finally:
                _CURRENT.reset(token)
                _STEP.reset(step_token)
            following = self.following(node, state, step.get("goto"))
            for nxt in following:
                rec.handoff(self.prefix + nxt, state)
            # The node's update is its decision (a triage's {"choice": ...} stands for its ticket).
            return {**step.get("update", {}), "_next": following}
        return agent

    def following(self, node: str, state: dict, goto: Any = None) -> list[str]:
        """The nodes that run after `node` left `state`: a Command's goto, else its edges."""
        if goto:
            targets = goto if isinstance(goto, (list, tuple)) else [goto]
        else:
            builder, targets = self.graph.builder, []
            for branch in builder.branches.get(node, {}).values():
                picked = branch.path.invoke(state)
                for p in picked if isinstance(picked, list) else [picked]:
                    targets.append(branch.ends[p] if branch.ends else p)
            if not targets:
                targets = sorted(end for start, end in builder.edges if start == node)
        if any(isinstance(t, Send) for t in targets):
            raise NotImplementedError("Send is not supported by GraphDesk: hand off with Command(goto=node)")
        return [t for t in targets if t != END]

    def run_root(self, node: str, state: dict) -> list[int]:
        """Record the graph from `node` (or its agent's name) with `state`: the node and, depth first,
        the nodes that follow."""
        return super().run_root(node if node in self.agents else self.prefix + node, state)

    def invoke(self, state: dict) -> list[int]:
        """Record one run from START, as `graph.invoke(state)` would run it."""
        entry = self.following(START, state)
        if len(entry) != 1:
            raise ValueError(f"START leads to {entry!r}: record a run from one node with run_root")
        return self.run_root(entry[0], state)
