"""What recording one root costs in Postgres statements and FalkorDB round trips, phase by phase: the
recording protocol's calls (open, a staged call, an effect, the finish that commits) through the
services the API calls, and an in-process `record_root`. Counted in-process: every statement Django
sends (CaptureQueriesContext) and every send to the FalkorDB server (a pipeline or a script is one
send, one round trip). Used by bench.agents (the figures beside its rates) and by
tests/agents/test_commit_costs.py (the budget a change may not exceed).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator
from urllib.parse import urlsplit

# The root bench.agents records: a writer (2 sets, a handoff) handing off to a reader (2 gets, an effect).
WRITER_CALLS = (("set", {"key": "faq/{n}", "value": "answer {n}"}), ("set", {"key": "shared", "value": "{n}"}))
READER_CALLS = (("get", {"key": "faq/{n}"}), ("get", {"key": "shared"}))
PHASES = ("open", "staged call", "effect", "committing finish", "HTTP root", "in-process root")


@dataclass
class Cost:
    statements: int = 0
    round_trips: int = 0
    sql: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # each round trip's commands, by name


@contextmanager
def counting(falkordb_url: str) -> Iterator[Cost]:
    """Count what the block sends: Postgres statements on the default connection, round trips to the
    FalkorDB server at `falkordb_url` (its port: the staging Redis is another server)."""
    import redis.connection
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    port = urlsplit(falkordb_url).port
    cost = Cost()
    send = redis.connection.AbstractConnection.send_packed_command

    def counted_send(conn, command, *args, **kwargs):
        if getattr(conn, "port", None) == port:
            cost.round_trips += 1
            cost.sent.append(_command_name(command))
        return send(conn, command, *args, **kwargs)

    redis.connection.AbstractConnection.send_packed_command = counted_send
    try:
        with CaptureQueriesContext(connection) as ctx:
            yield cost
    finally:
        redis.connection.AbstractConnection.send_packed_command = send
    # BEGIN and COMMIT are left out, as in the figures before (a savepoint and its release count).
    cost.sql = [q["sql"] for q in ctx.captured_queries if q["sql"] not in ("BEGIN", "COMMIT", "ROLLBACK")]
    cost.statements = len(cost.sql)


def _command_name(packed) -> str:
    """The first command of a packed send (RESP: *n, $len, NAME, …), for reading a count."""
    data = b"".join(packed) if isinstance(packed, (list, tuple)) else packed
    parts = data.split(b"\r\n", 3)
    return parts[2].decode(errors="replace") if len(parts) > 2 else "?"


def _fill(body: dict, n: int) -> dict:
    return {k: v.format(n=n) if isinstance(v, str) else v for k, v in body.items()}


def http_root(token, *, writer: str, reader: str, n: int, falkordb_url: str) -> dict[str, Cost]:
    """One root over the protocol's services, its cost by phase (an open and a staged call: the most any
    of the two opens and of the six staged calls cost) and in all (`HTTP root`: its ten calls)."""
    from provenance.recording import remote

    costs: dict[str, list[Cost]] = {phase: [] for phase in PHASES[:4]}

    def phase(name: str, fn):
        with counting(falkordb_url) as cost:
            answer = fn()
        costs[name].append(cost)
        return answer

    a = phase("open", lambda: remote.open_action(token=token, agent=writer, payload={"n": n}))["action"]
    for op, body in WRITER_CALLS + (("handoff", {"agent": reader, "payload": {"n": n, "ticket": f"t{n}"}}),):
        phase("staged call", lambda: remote.call(token=token, action_id=a, op=op, body=_fill(body, n)))
    phase("staged call", lambda: remote.finish_action(token=token, action_id=a, body={"decision": {"n": n}}))
    b = phase("open", lambda: remote.open_action(token=token, agent=reader, parent=a))["action"]
    for op, body in READER_CALLS:
        phase("staged call", lambda: remote.call(token=token, action_id=b, op=op, body=_fill(body, n)))
    phase("effect", lambda: remote.call(token=token, action_id=b, op="effect", body={
        "kind": "note", "amount": 0, "ticket": f"t{n}", "external": True, "idempotency_key": f"note-{n}"}))
    done = phase("committing finish", lambda: remote.finish_action(token=token, action_id=b,
                                                                   body={"decision": {"read": True}}))
    assert done["committed"] is True, done
    every = [c for each in costs.values() for c in each]
    total = Cost(sum(c.statements for c in every), sum(c.round_trips for c in every), [q for c in every for q in c.sql])
    return {name: max(each, key=lambda c: (c.statements, c.round_trips)) for name, each in costs.items()} | {
        "HTTP root": total}


def in_process_root(*, workspace: str, agent: str, n: int, falkordb_url: str) -> Cost:
    from provenance.recording.services import record_root

    with counting(falkordb_url) as cost:
        record_root(workspace=workspace, agent=agent, payload={"n": n})
    return cost


def report(costs: dict[str, Cost], before: dict | None = None) -> list[list]:
    """Table rows: phase, statements, round trips (and the figures `before`, {phase: (statements, round trips)})."""
    return [[phase, costs[phase].statements, costs[phase].round_trips]
            + (list(before.get(phase, ("", ""))) if before is not None else []) for phase in PHASES]


def per_root(token, *, workspace: str, writer: str, reader: str, local_writer: str, falkordb_url: str,
             n: int = 10_000) -> dict[str, Cost]:
    """Each phase's cost for one root, after a root of each kind warmed the connections and caches."""
    http_root(token, writer=writer, reader=reader, n=n, falkordb_url=falkordb_url)
    in_process_root(workspace=workspace, agent=local_writer, n=n, falkordb_url=falkordb_url)
    costs = http_root(token, writer=writer, reader=reader, n=n + 1, falkordb_url=falkordb_url)
    costs["in-process root"] = in_process_root(workspace=workspace, agent=local_writer, n=n + 1,
                                               falkordb_url=falkordb_url)
    return costs
