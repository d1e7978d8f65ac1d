"""Opening a root over the recording protocol with a workspace's history behind it, in the same run on the
same database: provenance.recording.remote.open_action (what every HTTP and MCP root open runs, without the web
server) in a workspace with 0 and N earlier recordings, each a copy of a real per-call recording's row
(the bench's writer and reader), committed.

- `counter`: the provisional id numbered from the workspace's row (Workspace.next_provisional_action);
- `scan` (the baseline): numbered as before that counter, from the highest `next_action` stored in the
  JSON of every recording the workspace ever had.
The two alternate open for open at each N, so load on the machine falls on both alike.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from unittest import mock

from bench import common
from bench.agents_concurrent import _reader_calls, _writer_calls

PRIOR = {"full": (0, 20_000, 100_000), "quick": (0, 20_000)}
OPENS = {"full": 40, "quick": 12}
WRITER, READER = "bench_remote_writer", "bench_remote_reader"
WORKSPACE = "bench-open-root"


def _allocate_by_scan(ws, session):
    """The numbering before the counter: the workspace's row lock, then the highest next_action any of
    its recordings stored."""
    from django.db.models import BigIntegerField, Max
    from django.db.models.fields.json import KT
    from django.db.models.functions import Cast

    from provenance.graph import queries
    from provenance.graph.graph import workspace_graph
    from provenance.models import Recording, Workspace

    Workspace.objects.select_for_update().filter(pk=ws.pk).first()
    top = workspace_graph(ws.name).ro_query(queries.MAX_IDS)[0].action or 0
    taken = (Recording.objects.filter(workspace=ws)
             .annotate(n=Cast(KT("state__next_action"), BigIntegerField())).aggregate(top=Max("n"))["top"])
    session.next_action = max(top + 1, taken or 0)
    session.next_seq = float(session.next_action)
    return session.allocate_action()


def _recorded_row(token):
    """One root and its handoff recorded call by call; its committed row is what the copies repeat."""
    from provenance.recording import remote
    from provenance.models import Recording

    def run(action: int, calls: list[dict]) -> dict:
        *middle, finish = calls
        for call in middle:
            op = call.pop("op")
            remote.call(token=token, action_id=action, op=op, body=call)
        finish.pop("op")
        return remote.finish_action(token=token, action_id=action, body=finish)

    a = remote.open_action(token=token, agent=WRITER, payload={"n": 0})["action"]
    run(a, _writer_calls(0, READER))
    b = remote.open_action(token=token, agent=READER, parent=a)["action"]
    assert run(b, _reader_calls(0, "note-0"))["committed"]
    return Recording.objects.get(workspace=token.workspace, first_action=a)


def _add_recordings(row, count: int, start: int) -> None:
    from provenance.models import Recording

    copies = []
    for i in range(start, start + count):
        first = 10 * i + 1
        state = {**row.state, "next_action": first + 2, "open": None}
        copies.append(Recording(workspace_id=row.workspace_id, token_id=row.token_id, status=row.status,
                                state=state, version=row.version, first_action=first, touched_at=row.touched_at,
                                finished_at=row.finished_at))
    Recording.objects.bulk_create(copies, batch_size=2_000)


def run(admin, quick: bool) -> list[dict]:
    from django.db import connections

    from core.db_roles import OWNER_ALIAS, split_roles
    from provenance.recording import remote
    from provenance.graph.graph import workspace_graph
    from provenance.models import AgentToken, Recording, Workspace
    from provenance.access.onboarding import issue_agent_token, register_agent

    mode = "quick" if quick else "full"
    Workspace.objects.using(OWNER_ALIAS if split_roles() else "default").filter(name=WORKSPACE).delete()
    workspace_graph(WORKSPACE).delete()
    ws = Workspace.objects.create(name=WORKSPACE)
    for agent in (WRITER, READER):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="bench",
                       via="cli")
    issue_agent_token(workspace=ws, label="bench", actor=admin, reason="bench", via="cli")
    token = AgentToken.objects.select_related("workspace").get(workspace=ws)
    template, have, rows = _recorded_row(token), 1, []
    for prior in PRIOR[mode]:
        if prior > have:
            t0 = time.perf_counter()
            _add_recordings(template, prior - have, have)
            have = prior
            # What the migration that brought the counter does for recordings made before it.
            Workspace.objects.filter(pk=ws.pk).update(next_provisional_action=10 * prior + 3)
            # Settled as a desk's history is (statistics, visibility): not autovacuum's work on fresh rows
            # landing inside the timings.
            with connections[OWNER_ALIAS if split_roles() else "default"].cursor() as cur:
                cur.execute(f"VACUUM ANALYZE {Recording._meta.db_table}")
            common.log(f"open root: {have:,} recordings in the workspace ({time.perf_counter() - t0:.1f}s to add)")
        # (The scan's opens do not move the counter, so the two may hand out the same id here: nothing
        # calls these recordings, and the workspace is thrown away.)
        behind, seconds = have, {"counter": [], "scan": []}
        for i in range(OPENS[mode] + 1):
            for numbering in seconds:
                with mock.patch.object(remote, "_allocate", _allocate_by_scan) if numbering == "scan" else nullcontext():
                    t0 = time.perf_counter()
                    remote.open_action(token=token, agent=WRITER, payload={"n": i})
                    if i:  # the first of each is a warm-up
                        seconds[numbering].append(time.perf_counter() - t0)
        rows += [{"numbering": numbering, "recordings": behind, "opens": len(values),
                  "p50_ms": common.median(values) * 1000, "p95_ms": common.pct(values, 95) * 1000}
                 for numbering, values in seconds.items()]
        have += 2 * (OPENS[mode] + 1)  # the opens' own recordings, left open
    Workspace.objects.using(OWNER_ALIAS if split_roles() else "default").filter(name=WORKSPACE).delete()
    workspace_graph(WORKSPACE).delete()
    return rows


def report(rows: list[dict]) -> None:
    base = {r["recordings"]: r["p50_ms"] for r in rows if r["numbering"] == "counter"}
    common.table("opening a root with the workspace's recordings behind it (open_action, no web server)",
                 ["numbering", "recordings", "opens", "p50 ms", "p95 ms", "x counter"],
                 [[r["numbering"] if r["numbering"] == "counter" else "scan (baseline)", r["recordings"], r["opens"],
                   r["p50_ms"], r["p95_ms"], r["p50_ms"] / base[r["recordings"]]] for r in rows],
                 ["counter: the next provisional id from the workspace's row; scan: from the highest next_action "
                  "in the JSON of every recording of the workspace, as before the counter",
                  "the earlier recordings are copies of one committed per-call root and its handoff; the two "
                  "numberings alternate, open for open", f"load average {common.load_avg()}"])
