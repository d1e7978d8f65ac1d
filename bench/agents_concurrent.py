"""Concurrent recording over HTTP: 1, 20 and 100 clients against the production web server (gunicorn with
uvicorn workers on loopback), call by call and in batches, each beside the single client of the same
mode measured in the same run.

Every client records the bench's roots (a writer: 2 sets and a handoff; its reader: 2 gets and an
effect; 8 recorder ops) until the window closes:
- `per_call`: one request per call (open, the calls, finish), 10 requests per root;
- `batch`: whole finished recordings, BATCH_ROOTS roots per `POST /recording/batch/`.
Latency percentiles are per request. By default each client records into a workspace of its own;
`--same-workspace` puts every client in one workspace, where recordings open side by side (a 409
workspace_busy, which a live desk should not answer, would be retried and counted).

Clients are asyncio tasks on one httpx connection pool in this process, which shares the machine's cores
with the server: on a small box the client's own CPU is part of what limits the figures.
"""
from __future__ import annotations

import asyncio
import statistics
import time

CLIENTS = (1, 20, 100)
MODES = ("per_call", "batch")
WINDOW_S = {"quick": 2.5, "full": 10.0}
BATCH_ROOTS = 10
OPS_PER_ROOT = 8


def _writer_calls(n: int, reader: str) -> list[dict]:
    return [{"op": "set", "key": f"faq/{n}", "value": f"answer {n}"}, {"op": "set", "key": "shared", "value": n},
            {"op": "handoff", "agent": reader, "payload": {"n": n, "ticket": f"t{n}"}},
            {"op": "finish", "decision": {"n": n}}]


def _reader_calls(n: int, key: str) -> list[dict]:
    return [{"op": "get", "key": f"faq/{n}"}, {"op": "get", "key": "shared"},
            {"op": "effect", "kind": "note", "amount": 0, "ticket": f"t{n}", "external": True,
             "idempotency_key": key},  # the bench's workspace holds no desk tickets
            {"op": "finish", "decision": {"read": True}}]


class _Client:
    def __init__(self, http, base: str, key: str, writer: str, reader: str, client_no: int):
        self.http, self.base, self.writer, self.reader = http, base + "/api/v1/recording", writer, reader
        self.headers = {"Authorization": f"Bearer {key}"}
        self.latencies: list[float] = []
        self.conflicts = self.errors = self.ops = self.reconnects = 0
        self.n = client_no * 1_000_000

    async def _post(self, path: str, body: dict) -> dict | None:
        import httpx

        t0 = time.perf_counter()
        for attempt in range(3):
            try:
                response = await self.http.post(self.base + path, json=body, headers=self.headers)
                break
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError):
                # A keep-alive connection the server closed as the request left: it was never read.
                self.reconnects += 1
                if attempt == 2:
                    raise
        self.latencies.append(time.perf_counter() - t0)
        if response.status_code == 409 and response.json()["error"]["code"] == "workspace_busy":
            self.conflicts += 1
            return None
        if response.status_code >= 400:
            self.errors += 1
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        return response.json()

    async def per_call_root(self) -> None:
        self.n += 1
        n = self.n
        while (opened := await self._post("/actions/", {"agent": self.writer, "payload": {"n": n}})) is None:
            await asyncio.sleep(0.005)
        a = opened["action"]
        for call in _writer_calls(n, self.reader):
            op = call.pop("op")
            await self._post(f"/actions/{a}/{op}/", call)
        b = (await self._post("/actions/", {"agent": self.reader, "parent": a}))["action"]
        for call in _reader_calls(n, f"note-{n}"):
            op = call.pop("op")
            await self._post(f"/actions/{b}/{op}/", call)
        self.ops += OPS_PER_ROOT

    async def batch_roots(self) -> None:
        actions = []
        for _ in range(BATCH_ROOTS):
            self.n += 1
            actions += [{"agent": self.writer, "payload": {"n": self.n}, "parent": None,
                         "calls": _writer_calls(self.n, self.reader)},
                        {"agent": self.reader, "parent": len(actions), "calls": _reader_calls(self.n, f"note-{self.n}")}]
        await self._post("/batch/", {"actions": actions})
        self.ops += OPS_PER_ROOT * BATCH_ROOTS


async def _run_clients(base: str, keys: list[str], writer: str, reader: str, clients: int, mode: str,
                       window: float) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        pool = [_Client(http, base, keys[i % len(keys)], writer, reader, i) for i in range(clients)]
        deadline = time.perf_counter() + window

        async def loop(c: _Client) -> None:
            step = c.per_call_root if mode == "per_call" else c.batch_roots
            while time.perf_counter() < deadline:
                await step()

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in pool))
        seconds = time.perf_counter() - t0
    latencies = sorted(x for c in pool for x in c.latencies)
    ops = sum(c.ops for c in pool)
    return {"clients": clients, "mode": mode, "ops": ops, "seconds": seconds, "ops_per_s": ops / seconds,
            "requests": len(latencies), "requests_per_s": len(latencies) / seconds,
            "p50_ms": _pct(latencies, 50) * 1000, "p95_ms": _pct(latencies, 95) * 1000,
            "conflicts": sum(c.conflicts for c in pool), "reconnects": sum(c.reconnects for c in pool)}


def _pct(values: list[float], p: int) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def run(*, base: str, keys: list[str], writer: str, reader: str, quick: bool, same_workspace: bool,
        client_counts=CLIENTS, server_cpu=lambda: 0.0) -> list[dict]:
    """Rows for each mode and client count; `keys[i]` is client i's token (one workspace each, or one
    token for all with same_workspace). `server_cpu`: the web workers' CPU seconds so far (each row's
    `server_cpu_ms_per_op` is its difference over the row, per op)."""
    window = WINDOW_S["quick" if quick else "full"]
    rows = []
    for mode in MODES:
        base_row = None
        for clients in client_counts:
            cpu0 = server_cpu()
            row = asyncio.run(_run_clients(base, keys[:1] if same_workspace else keys, writer, reader, clients,
                                           mode, window))
            row["server_cpu_ms_per_op"] = (server_cpu() - cpu0) * 1000 / row["ops"] if row["ops"] else None
            row["same_workspace"] = same_workspace
            from bench import common

            common.log(f"{mode} x {clients} clients: {row['ops_per_s']:.0f} ops/s, p50 {row['p50_ms']:.0f} ms, "
                       f"p95 {row['p95_ms']:.0f} ms ({row['seconds']:.1f}s)")
            base_row = base_row or row
            row["x_one_client"] = row["ops_per_s"] / base_row["ops_per_s"] if base_row["ops_per_s"] else None
            rows.append(row)
    return rows
