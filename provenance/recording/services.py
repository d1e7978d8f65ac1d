"""Services that record agent work: a whole desk run, or one root action of any registered agent."""
from __future__ import annotations

import json
import logging

from django.db import OperationalError, connection, transaction

from core import locks
from core.errors import DomainError
from core.vocabulary import Via
from provenance.recording import quarantine
from provenance.graph import graph_debts, queries
from provenance import validation
from provenance.agents import get_agent
from provenance.desk.scenario import PAGES, canonical_tickets, generated_tickets
from provenance.graph.graph import GraphUnavailable, ping, workspace_graph
from provenance.recording.live import SnapshotRecording
from provenance.models import GraphDebt, Source, Ticket, Workspace
from provenance.progress import ProgressFn, noop
from provenance.recording.recorder import GraphRecorder, UnknownSource
from provenance.signals import desk_replacing

log = logging.getLogger(__name__)


class UnknownWorkspace(LookupError):
    pass


class MalformedPayload(ValueError):
    pass


# Advisory lock namespace: (WORKSPACE_LOCK, workspace id) serialises every writer of a workspace graph.
WORKSPACE_LOCK = locks.WORKSPACE_GRAPH


class WorkspaceBusy(DomainError, RuntimeError):
    """Another writer held the workspace's graph for as long as this one could wait. `retry_after` is
    how soon trying again makes sense (a recording's flush or a repair's apply step takes seconds), not
    how long the holder may still take: the API sends it as Retry-After and in details."""

    code, status = "workspace_busy", 409
    retry_after = 5

    def details(self):
        return {"retry_after": self.retry_after}


def workspace_lock(workspace: Workspace, *, wait_seconds: int = 30, add_actions: int = 0) -> int:
    """Serialise graph writers of one workspace (recording, repairs) until the transaction ends.
    Waits at most `wait_seconds` for another writer, then refuses with WorkspaceBusy. Returns the
    workspace's run number as it stands under the lock; `add_actions`: counted into its action_count in
    the same statement (a commit's bookkeeping: the caller rolls back if it writes nothing after all).

    Lock order: this lock first, then the workspace's row (and audit chains). A repair holds this lock
    and then updates the row; a writer waiting here while holding the row would deadlock with it.

    Statements: two when the graph is free (the common case: the lock taken without waiting, then the
    row), four more when it waits (a timeout, and a savepoint so that a caller may go on after
    WorkspaceBusy). The second is a statement of its own because it must see a debt the last holder
    committed before it let go (provenance.graph.graph_debts): a statement sees what was committed
    when it began."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [WORKSPACE_LOCK, workspace.pk])
        if not cur.fetchone()[0]:
            cur.execute("SET LOCAL lock_timeout = %s", [f"{int(wait_seconds * 1000)}ms"])
            try:
                with transaction.atomic():
                    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [WORKSPACE_LOCK, workspace.pk])
            except OperationalError:
                raise WorkspaceBusy(f"workspace {workspace.name!r} is busy (a repair or another recording is "
                                    f"writing its graph); try again in {WorkspaceBusy.retry_after} s") from None
        # Whether a failed recording left nodes owed to the graph (provenance.graph.graph_debts): paid
        # here, before this writer reads the graph's top ids.
        table = Workspace._meta.db_table
        checks = f"run_number, set_config('lock_timeout', '0', true), {graph_debts.OWED_SQL}"
        if add_actions:
            cur.execute(f"UPDATE {table} SET action_count = action_count + %s WHERE id = %s RETURNING {checks}",
                        [add_actions, workspace.pk, workspace.name])
        else:
            cur.execute(f"SELECT {checks} FROM {table} WHERE id = %s", [workspace.name, workspace.pk])
        found = cur.fetchone()
        if found is None:
            raise Workspace.DoesNotExist(f"workspace {workspace.name!r} is gone")
        run_number, _, owed = found
        if owed:
            graph_debts.settle(workspace.name)
    return run_number


def settle_owed(*, workspace: Workspace, wait_seconds: int = 30) -> bool:
    """Pay what failed recordings owe `workspace`'s graph now, by taking its lock for a moment (which
    pays it: provenance.graph_debts), before a repair walks and in the sweep. False when nothing was
    owed or another writer holds the graph (and pays it). Raises GraphUnavailable."""
    if not GraphDebt.objects.filter(workspace=workspace.name).exists():
        return False
    try:
        with transaction.atomic():
            workspace_lock(workspace, wait_seconds=wait_seconds)
    except WorkspaceBusy:  # its holder took the lock after the debt was written, and paid it first
        log.warning("the graph of %s was busy; its writer pays what is owed", workspace.name)
        return False
    return True


def settle_reachable(*, skip_servers: frozenset[str] = frozenset()) -> list[str]:
    """The sweep's share: pay the debts of every workspace whose FalkorDB server answers. Returns the
    workspaces paid; one still away or busy waits for the next sweep."""
    paid = []
    names = set(GraphDebt.objects.values_list("workspace", flat=True))
    for ws in Workspace.objects.filter(name__in=names).exclude(falkordb_server__in=skip_servers):
        try:
            if settle_owed(workspace=ws, wait_seconds=5):
                paid.append(ws.name)
        except GraphUnavailable as exc:
            log.warning("sweep: the graph of %s is still owed: %s", ws.name, exc)
    return paid


def get_workspace(name: str) -> Workspace:
    validation.identifier(name, field="workspace", max_length=validation.WORKSPACE_MAX)
    try:
        return Workspace.objects.get(name=name)
    except Workspace.DoesNotExist:
        raise UnknownWorkspace(f"unknown workspace {name!r}") from None


def _replace_tickets(ws: Workspace) -> None:
    """Remove a workspace's tickets before a desk re-run writes new ones. The application's database role
    may not DELETE tickets (core.db_roles): the owner's SECURITY DEFINER function does it, for
    this one workspace, inside this transaction. Without split roles (one login for everything) the
    function is not installed and the ORM deletes them."""
    with connection.cursor() as cur:
        cur.execute("SELECT to_regprocedure('kintsugi_replace_desk_tickets(bigint)') IS NOT NULL")
        if cur.fetchone()[0]:
            cur.execute("SELECT kintsugi_replace_desk_tickets(%s)", [ws.pk])
            return
    ws.tickets.all().delete()


def desk_run(*, workspace: str, tickets: int | None = None, seed: int | None = None,
             exclude_source: str | list[str] | None = None, actor=None, reason: str = "desk run",
             progress: ProgressFn = noop) -> dict:
    """Record one run of the support desk into `workspace`, replacing an earlier run of it.

    `exclude_source` (one page id or several) records the run as if those pages never existed."""
    workspace = validation.workspace_name(workspace)
    if tickets is not None:
        validation.ticket_count(tickets)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63):
        raise validation.InvalidInput("seed must be a whole number from 0 to 2**63 - 1")
    reason = validation.reason(reason)
    page_ids = [p[0] for p in PAGES]
    excluded = [exclude_source] if isinstance(exclude_source, str) else list(exclude_source or [])
    for source in excluded:
        if source not in page_ids:
            raise UnknownSource(f"unknown source {source!r}; the desk's pages are {', '.join(page_ids)}")
    specs = generated_tickets(tickets, seed or 0) if tickets else canonical_tickets()
    ping(workspace=workspace)  # fail before anything is replaced (a new workspace: checked at its first write)
    with transaction.atomic():
        ws, _ = Workspace.objects.get_or_create(name=workspace)
        # The graph's lock before the workspace's row, as every writer of the graph takes them (a repair
        # holding the graph updates the row: the other order deadlocks with it).
        workspace_lock(ws)
        ws = Workspace.objects.select_for_update().get(pk=ws.pk)
        desk_replacing.send(sender=Workspace, workspace=ws, actor=actor, reason=reason)
        ws.run_number += 1
        ws.run_params = {"tickets": tickets, "seed": seed, "exclude_source": excluded}
        trust = dict(ws.sources.values_list("source_id", "trust"))  # a lead's judgement outlives the run
        ws.sources.all().delete()
        _replace_tickets(ws)
        pages = [p for p in PAGES if p[0] not in excluded]
        Source.objects.bulk_create(Source(workspace=ws, source_id=s, title=t, content=c,
                                          trust=trust.get(s, Source.Trust.UNKNOWN)) for s, t, c in pages)
        Ticket.objects.bulk_create(
            Ticket(workspace=ws, ticket_id=t.ticket_id, customer_name=t.customer_name, customer_email=t.email,
                   subject=t.subject, body=t.body, amount_cents=t.amount_cents, tier=t.tier,
                   payment_reference=f"ch_{seed or 0}_{t.ticket_id}")
            for t in specs
        )
        for baseline in (False, True):
            workspace_graph(ws.name, baseline=baseline).delete()
        graph = workspace_graph(ws.name)
        session = GraphRecorder(graph=graph, workspace=ws.name, sources={s: c for s, _, c in pages},
                                   effects="live", run_number=ws.run_number, load=False)
        session.quarantined = quarantine.held(workspace=ws)
        total = len(pages) + len(specs)
        for i, (source, _, _) in enumerate(pages, start=1):
            session.run_root("research", {"source": source})
            progress(i, total)
        for i, ticket in enumerate(Ticket.objects.filter(workspace=ws).order_by("ticket_id"), start=len(pages) + 1):
            session.run_root("triage", ticket.as_payload())
            progress(i, total)
        session.flush()
        quarantine.record_attempts(workspace=ws, hits=session.quarantine_hits, via=Via.CLI, agent="research")
        ws.action_count = len(session.recorded)
        ws.save(update_fields=["run_number", "run_params", "action_count"])
    return desk_summary(workspace=ws)


def desk_summary(*, workspace: Workspace) -> dict:
    graph = workspace_graph(workspace.name)
    rows = graph.ro_query(queries.TICKETS_READING, {"key": "vip_rules"})
    vip_tickets = set(rows[0][0]) if rows else set()
    effects = graph.ro_query(queries.ALL_EFFECTS)
    refunds = [(t, amt) for kind, t, amt in effects if kind == "refund"]
    return {
        "workspace": workspace.name,
        "actions": graph.ro_query(queries.ACTION_COUNT)[0][0],
        "tickets": workspace.tickets.count(),
        "tickets_read_vip_rules": len(vip_tickets),
        "effects": len(effects),
        "refund_total": sum(a for _, a in refunds) / 100,
        "vip_rules_refund_total": sum(a for t, a in refunds if t in vip_tickets) / 100,
    }


def record_root(*, workspace: str, agent: str, payload: str | dict, actor=None) -> list[int]:
    """Run one root action of a registered agent (and its handoffs) in an existing workspace, beside
    any other recordings of it (provenance.recording.live: a snapshot to read, a place in the order at commit).

    All or nothing: a failure part-way (a bad effect in a handoff, the graph gone) rolls back the
    Postgres rows and removes from the graph whatever was already flushed of it."""
    ws = get_workspace(workspace)
    get_agent(agent)
    if isinstance(payload, str):
        if len(payload) > validation.MAX_PAYLOAD_BYTES:
            raise MalformedPayload(f"payload is over {validation.MAX_PAYLOAD_BYTES} bytes")
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise MalformedPayload(f"payload is not JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(payload, dict):
        raise MalformedPayload("payload must be a JSON object")
    validation.payload(payload)
    # The agents run on a snapshot holding nothing; only the commit takes the graph's lock, briefly
    # (provenance.recording.live). A failure before the commit leaves nothing anywhere; a graph that is
    # away fails the snapshot's first read, before any agent runs.
    recording = SnapshotRecording(ws)
    try:
        try:
            recording.run(agent, payload)
        except KeyError as exc:
            raise MalformedPayload(f"payload lacks the field {exc.args[0]!r} that agent {agent!r} needs") from None
        return recording.commit()
    finally:
        # Counted outside the recording's commit: a failed recording writes nothing, and the refused
        # ingests it made still happened.
        hits = recording.session.quarantine_hits
        if hits:
            quarantine.record_attempts(workspace=ws, hits=hits, via=Via.CLI, agent=agent)
