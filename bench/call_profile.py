"""Web CPU of one recording call, in one process: the production ASGI app (kintsugi_site.asgi) driven
in-process, without a socket, by the bench's writer → reader roots (open, 2 sets, handoff, finish; open, 2
gets, effect, finish). Each request's process CPU is taken on its own, by kind of call; `--profile`
also prints cProfile's top functions over the staged calls only.

The recording entrance's thread pool is replaced by one that runs in the calling thread, so the CPU and
the profile are the request's own (`threaded` rows keep the pool: the hop to a thread and back).

    python -m bench.call_profile [--roots N] [--profile] [--threaded]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from collections import defaultdict
from concurrent.futures import Executor, Future


class InlineExecutor(Executor):
    """Runs what it is given at once, in the caller's thread (what cProfile can see)."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller, as a pool would
            future.set_exception(exc)
        return future


STAGED = ("set", "get", "handoff", "finish (hands off)")


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000)}


class InProcessClient:
    def __init__(self, app, key: str):
        self.app, self.key = app, key

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        raw = json.dumps(body).encode()
        headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"), (b"accept", b"*/*"),
                   (b"authorization", f"Bearer {self.key}".encode()), (b"content-length", str(len(raw)).encode())]
        sent, answer = False, {}

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"] = answer.get("body", b"") + message.get("body", b"")

        await self.app(_scope("/api/v1/recording" + path, headers), receive, send)
        return answer["status"], json.loads(answer["body"])


async def _roots(client: InProcessClient, roots: int, first: int, timings, profile=None,
                 profiled=STAGED) -> None:
    async def timed(label: str, path: str, body: dict, want: int = 200) -> dict:
        staged = profile is not None and label in profiled
        c0 = time.process_time()
        if staged:
            profile.enable()
        status, answer = await client.post(path, body)
        if staged:
            profile.disable()
        timings[label].append(time.process_time() - c0)
        assert status == want, (label, status, answer)
        return answer

    for n in range(first, first + roots):
        a = (await timed("open", "/actions/", {"agent": "bench_remote_writer", "payload": {"n": n}}, 201))["action"]
        await timed("set", f"/actions/{a}/set/", {"key": f"faq/{n}", "value": f"answer {n}"})
        await timed("set", f"/actions/{a}/set/", {"key": "shared", "value": n})
        await timed("handoff", f"/actions/{a}/handoff/",
                    {"agent": "bench_remote_reader", "payload": {"n": n, "ticket": f"t{n}"}})
        done = await timed("finish (hands off)", f"/actions/{a}/finish/", {"decision": {"n": n}})
        assert done["committed"] is False
        b = (await timed("open", "/actions/", {"agent": "bench_remote_reader", "parent": a}, 201))["action"]
        await timed("get", f"/actions/{b}/get/", {"key": f"faq/{n}"})
        await timed("get", f"/actions/{b}/get/", {"key": "shared"})
        await timed("effect", f"/actions/{b}/effect/", {"kind": "note", "amount": 0, "ticket": f"t{n}",
                                                       "external": True, "idempotency_key": f"note-{n}"})
        done = await timed("finish (commits)", f"/actions/{b}/finish/", {"decision": {"read": True}})
        assert done["committed"] is True


def _key(admin) -> str:
    from bench.agents import REMOTE
    from provenance.access.onboarding import issue_agent_token, register_agent
    from provenance.graph.graph import workspace_graph
    from provenance.models import Workspace

    ws, created = Workspace.objects.get_or_create(name="bench-call-profile")
    workspace_graph(ws.name).delete()
    ws.recordings.all().delete()
    if created:
        for agent in REMOTE:
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="bench",
                           via="cli")
    return issue_agent_token(workspace=ws, label="bench", actor=admin, reason="bench", via="cli")[1]


def run(*, roots: int, profile: bool, threaded: bool, profiled=STAGED) -> dict:
    from django.contrib.auth import get_user_model

    from bench import common

    admin, _ = get_user_model().objects.get_or_create(username="bench-agents", defaults={"is_superuser": True})
    key = _key(admin)
    from kintsugi_site import asgi

    if not threaded:
        # The requests run on the event loop's thread: Django's guard against the ORM there is lifted
        # (nothing else runs on this loop meanwhile).
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        asgi.recording_app.app.executor = InlineExecutor()
    client = InProcessClient(asgi.application, key)
    warm = defaultdict(list)
    asyncio.run(_roots(client, 3, -10, warm))  # imports, connections, the scripts loaded
    timings: dict[str, list[float]] = defaultdict(list)
    asyncio.run(_roots(client, roots, 0, timings))
    # The profile on roots of their own: its own cost stays out of the timings above. Process CPU, not
    # wall time: on a shared box a round trip's wait is someone else's CPU.
    prof = cProfile.Profile(time.process_time) if profile else None
    if prof is not None:
        asyncio.run(_roots(client, roots, roots, defaultdict(list), prof, profiled))
    rows = [[label, len(v), statistics.median(v) * 1000, statistics.mean(v) * 1000] for label, v in timings.items()]
    staged = [x for label in STAGED for x in timings[label]]
    rows.append(["staged calls together", len(staged), statistics.median(staged) * 1000,
                 statistics.mean(staged) * 1000])
    common.table(f"web CPU per request, in one process ({'thread pool' if threaded else 'inline'}, {roots} roots)",
                 ["request", "count", "p50 CPU ms", "mean CPU ms"], rows,
                 [f"load average {common.load_avg()}"])
    if prof is not None:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(40)
        print(out.getvalue())
    return {"roots": roots, "timings_ms": {k: [x * 1000 for x in v] for k, v in timings.items()}}


def redis_clients(calls: int = 2000) -> list[list]:
    """CPU per STAGE script call (provenance.recording.staging) with the sync client a thread runs it with,
    and with redis.asyncio on an event loop: what staging a call on the loop instead of a thread would
    spend on the client."""
    import redis
    import redis.asyncio as aredis
    from django.conf import settings

    from provenance.recording import staging

    key, state = "bench:call-profile:stage", json.dumps({"records": [{"id": 1, "writes": []}]})
    sync = redis.Redis.from_url(settings.KINTSUGI_CACHE_URL)
    script = sync.register_script(staging.STAGE)
    sync.delete(key)
    sync.hset(key, mapping={"v": 0, "s": state, "t": time.time()})

    def one(version):
        return script(keys=[key], args=[version, state, time.time(), 300, 900])

    c0 = time.process_time()
    for version in range(calls):
        assert one(version) == 1
    sync_ms = (time.process_time() - c0) * 1000 / calls

    async def on_loop() -> float:
        client = aredis.Redis.from_url(settings.KINTSUGI_CACHE_URL)
        ascript = client.register_script(staging.STAGE)
        await ascript(keys=[key], args=[calls, state, time.time(), 300, 900])
        c0 = time.process_time()
        for version in range(calls + 1, 2 * calls + 1):
            assert await ascript(keys=[key], args=[version, state, time.time(), 300, 900]) == 1
        spent = (time.process_time() - c0) * 1000 / calls
        await client.aclose()
        return spent

    async_ms = asyncio.run(on_loop())
    sync.delete(key)
    return [["redis-py, a thread's blocking call", calls, sync_ms], ["redis.asyncio on the event loop", calls, async_ms]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--roots", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--threaded", action="store_true")
    parser.add_argument("--profile-requests", default=",".join(STAGED),
                        help=f"which requests --profile covers (default: the staged ones); of: open, effect, "
                             f"finish (commits), {', '.join(STAGED)}")
    parser.add_argument("--redis", action="store_true", help="also time the STAGE script's client, sync and async")
    args = parser.parse_args()
    from bench import common

    # A pool of Postgres connections, as the bench's web server has (bench.agents): without one every
    # request that reads the database would pay for a new connection.
    os.environ.setdefault("KINTSUGI_DB_POOL_MAX_SIZE", "8")
    common.setup()
    run(roots=args.roots, profile=args.profile, threaded=args.threaded,
        profiled=tuple(args.profile_requests.split(",")))
    if args.redis:
        common.table("the STAGE script's round trip: client CPU per call", ["client", "calls", "CPU ms per call"],
                     redis_clients(), [f"load average {common.load_avg()}"])


if __name__ == "__main__":
    main()
