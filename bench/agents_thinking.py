"""Agents that think: N agents of one workspace record over HTTP at once, each waiting `think` seconds
for its model inside its action (between reading memory and writing it), beside one agent doing the same
alone in the same run. Nothing holds the workspace while an agent thinks (provenance.recording.live), so N agents
should take about as long as one.

Each agent records the bench's writer → reader root: the writer opens, reads `shared`, thinks, then
sets two keys, hands off and finishes; the reader reads both keys, records an external note and
finishes. `per_call` sends one request per call; `calls` sends the calls around the thinking as
`POST …/actions/{id}/calls/` (open, one read, think, one request with the rest).
"""
from __future__ import annotations

import asyncio
import time

AGENTS = 20
THINK_S = 1.0
MODES = ("per_call", "calls")


class _Agent:
    def __init__(self, http, base: str, key: str, writer: str, reader: str):
        self.http, self.base, self.writer, self.reader = http, base + "/api/v1/recording", writer, reader
        self.headers = {"Authorization": f"Bearer {key}"}
        self.conflicts = 0
        self.opened = self.thought = 0.0  # when its root was open and read, when its thinking ended

    async def _post(self, path: str, body: dict) -> dict:
        while True:
            response = await self.http.post(self.base + path, json=body, headers=self.headers)
            if response.status_code == 409:  # counted: a live desk should never answer it here
                self.conflicts += 1
                await asyncio.sleep(0.05)
                continue
            if response.status_code >= 400:
                raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
            return response.json()

    async def _calls(self, action: int, calls: list[dict], mode: str) -> None:
        if mode == "calls":
            await self._post(f"/actions/{action}/calls/", {"calls": calls})
            return
        for call in calls:
            call = dict(call)
            op = call.pop("op")
            await self._post(f"/actions/{action}/{op}/", call)

    async def root(self, n: int, mode: str, think: float) -> None:
        a = (await self._post("/actions/", {"agent": self.writer, "payload": {"n": n}}))["action"]
        await self._calls(a, [{"op": "get", "key": "shared"}], mode)
        self.opened = time.perf_counter()
        await asyncio.sleep(think)  # the model
        self.thought = time.perf_counter()
        await self._calls(a, [{"op": "set", "key": f"faq/{n}", "value": f"answer {n}"},
                              {"op": "set", "key": "shared", "value": n},
                              {"op": "handoff", "agent": self.reader, "payload": {"n": n, "ticket": f"t{n}"}},
                              {"op": "finish", "decision": {"n": n}}], mode)
        b = (await self._post("/actions/", {"agent": self.reader, "parent": a}))["action"]
        await self._calls(b, [{"op": "get", "key": f"faq/{n}"}, {"op": "get", "key": "shared"},
                              {"op": "effect", "kind": "note", "amount": 0, "ticket": f"t{n}", "external": True,
                               "idempotency_key": f"think-{n}"},
                              {"op": "finish", "decision": {"read": True}}], mode)


async def _wave(base: str, key: str, writer: str, reader: str, agents: int, mode: str, think: float,
                first: int) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=agents, max_keepalive_connections=agents)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        pool = [_Agent(http, base, key, writer, reader) for _ in range(agents)]
        t0 = time.perf_counter()
        await asyncio.gather(*(agent.root(first + i, mode, think) for i, agent in enumerate(pool)))
        seconds = time.perf_counter() - t0
    # Every agent was inside its open action at one moment: the last to open did so before the first
    # stopped thinking. A desk holding the workspace per recording could never get there.
    together = max(agent.opened for agent in pool) < min(agent.thought for agent in pool)
    return {"agents": agents, "mode": mode, "think_s": think, "seconds": seconds, "all_open_at_once": together,
            "conflicts": sum(agent.conflicts for agent in pool)}


def run(*, base: str, key: str, writer: str, reader: str, agents: int = AGENTS, think: float = THINK_S,
        count_roots=None) -> list[dict]:
    """Rows per mode: one agent alone (the baseline), then `agents` at once, all in one workspace (`key`'s).
    `count_roots()` (optional) returns the workspace's committed roots, checked after each wave."""
    from bench import common

    rows, first = [], 10_000_000
    for mode in MODES:
        alone = asyncio.run(_wave(base, key, writer, reader, 1, mode, think, first))
        first += 1
        before = count_roots() if count_roots else None
        row = asyncio.run(_wave(base, key, writer, reader, agents, mode, think, first))
        first += agents
        row["alone_s"] = alone["seconds"]
        row["x_alone"] = row["seconds"] / alone["seconds"]
        if count_roots:
            row["committed"] = count_roots() - before
        common.log(f"{agents} agents thinking {think:g} s, {mode}: {row['seconds']:.2f} s "
                   f"(one alone {alone['seconds']:.2f} s), {row['conflicts']} conflicts")
        rows.append(row)
    return rows
