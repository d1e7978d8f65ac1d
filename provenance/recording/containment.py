"""Containment: the harm a flagged source did stops at its flag, not when its repair lands.

In the flag's transaction (under the workspace graph's lock, so no recording commits half-way through
it), every live fact version whose lineage includes the flagged source (the versions written by the
actions of the source's radius: those that ingested it and, transitively, those fed or handed off by
them) is marked contained by the incident on its Fact node. Live reads (in-process recordings, HTTP,
MCP, batches) resolve as if a contained version did not exist: the previous clean version, or not
found (provenance.graph.fact_index). The mark lives on the node, not in a Postgres table, because a live read
already asks the graph for the key's versions (KeyedFactIndex): the filter costs no round trip and no
per-recording load of a set of ids that grows with the radius. Postgres keeps the containment's summary
(provenance.models.Containment) and the held effects.

A recording that read through a containment (around a contained version, or a version contained after it
read it, or downstream of an action of its recording that did) is marked on its Action node
(`contained`: the incidents), writes contained versions, and its effects are held: recorded in the graph
(held, live) and as HeldEffect rows, never dispatched, answered `perform: false, held: true` over the
protocol. Its repair's catch-up re-runs the marked actions against the repaired facts (repairs.catch_up).

How it ends, only by a repair landing or a person: a blocked, failed or needs-attention repair keeps it.
The repair replaces it with the repaired facts once its plan and catch-up are applied (the marks come off
under the same hold of the graph), and settles the held effects when the incident is repaired: performed
when the clean run made the same effect (it is still live), dropped when the repair cancelled it.
Closing the incident as a false alarm takes the marks off (the nodes are as before the flag) and
releases the held effects as they were asked for.

The marks follow the flag's commit: a flag whose transaction fails takes them off (repairs.services),
one inside a caller's transaction marks after that commit, and lift_orphans() sweeps any left behind.
The what-if reads what a flag would contain (preview) without marking.

This module is the flag's and the repair's side; a recording's side is provenance.graph.contained_view.
"""
from __future__ import annotations

import logging
from collections import defaultdict

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from core.audit import trail
from core.vocabulary import AuditAction
from provenance.graph import containment_queries as cq
from provenance.graph.graph import Graph, GraphUnavailable, workspace_graph
from provenance.models import Containment, HeldEffect, Workspace

log = logging.getLogger(__name__)
CHUNK = 5_000  # radius actions marked per round trip
SAMPLE = 50  # contained versions kept on the row for the incident page


# --- the flag's side ---------------------------------------------------------------------------------------
def hold_graph(workspace: Workspace) -> bool:
    """Take the workspace graph's lock for the flag's transaction (first, before any row of the workspace
    is locked, as every graph writer takes them). False: a writer held it past a few seconds (a repair
    applying): the flag goes through and its containment follows (ensure)."""
    from provenance.recording.services import WorkspaceBusy, workspace_lock  # the lock's one implementation

    try:
        workspace_lock(workspace, wait_seconds=5)
    except WorkspaceBusy:
        return False
    return True


def contain(*, workspace: Workspace, incident_id: int, source_id: str, flagged_at, actor, reason: str,
            via: str, locked: bool) -> Containment:
    """Contain the source's lineage now, in the caller's (the flag's) transaction, which holds the graph's
    lock (`locked`). Without the lock, or with the graph away, the row says it is not contained yet and
    ensure() contains it after the commit (and the repair, before it walks)."""
    row = Containment.objects.create(workspace=workspace, incident_id=incident_id, source_id=source_id,
                                     flagged_at=flagged_at)
    if not locked:
        return row
    try:
        with transaction.atomic():
            _mark(row, workspace_graph(workspace.name))
    except GraphUnavailable as exc:
        log.warning("containment of incident %s deferred: %s", incident_id, exc)
        return row
    trail.record(action=AuditAction.SOURCE_CONTAINED, subject_type="containment", subject_id=row.pk, via=via,
                 actor=actor, reason=reason, incident_id=incident_id, workspace=workspace,
                 data={"source": source_id, "facts": row.facts, "seconds": row.seconds})
    return row


def unmark_quietly(*, workspace: Workspace, incident_id: int) -> None:
    """The flag's transaction failed after its marks were written (its commit included): take them off,
    so no version stays contained by an incident that does not exist. A graph away now leaves them to
    lift_orphans(), which the next repair of the workspace runs."""
    try:
        workspace_graph(workspace.name).query(cq.LIFT, {"incident": incident_id})
    except Exception:  # noqa: BLE001 - the flag's own failure is what the caller reports
        log.warning("marks of the unflagged incident %s left for the next repair", incident_id, exc_info=True)


def lift_orphans(*, workspace: Workspace) -> int:
    """Take off the marks of incidents that hold no containment (a flag whose commit failed and whose
    marks could not be taken off then). Under the graph's lock: a flag in flight holds it until its row
    is committed. Returns how many incidents' marks it lifted (0 when the graph stays busy)."""
    from provenance.recording.services import WorkspaceBusy, workspace_lock

    with transaction.atomic():
        try:
            workspace_lock(workspace, wait_seconds=30)
        except WorkspaceBusy:
            return 0
        graph = workspace_graph(workspace.name)
        marked = {r.n for r in graph.ro_query(cq.MARKING_INCIDENTS, {})}
        holding = set(Containment.objects.filter(workspace=workspace, incident_id__in=marked,
                                                 ended=Containment.Ended.HOLDING).values_list("incident_id", flat=True))
        for incident_id in sorted(marked - holding):
            graph.query(cq.LIFT, {"incident": incident_id})
    return len(marked - holding)


def ensure_quietly(*, incident_id: int, via: str) -> None:
    """ensure() right after a flag that could not contain at once; a failure is left to the repair."""
    try:
        ensure(incident_id=incident_id, via=via, wait_seconds=30)
    except Exception:  # noqa: BLE001 - the repair contains before it walks, and says why it cannot
        log.warning("containment of incident %s left to its repair", incident_id, exc_info=True)


def ensure(*, incident_id: int, via: str, wait_seconds: int = 600) -> Containment | None:
    """Contain what a flag could not contain at once (safe to call again: marked versions stay marked)."""
    with transaction.atomic():
        row = (Containment.objects.select_for_update().select_related("workspace")
               .filter(incident_id=incident_id, contained_at__isnull=True, ended=Containment.Ended.HOLDING).first())
        if row is None:
            return None
        from provenance.recording.services import workspace_lock

        workspace_lock(row.workspace, wait_seconds=wait_seconds)
        _mark(row, workspace_graph(row.workspace.name))
        trail.record(action=AuditAction.SOURCE_CONTAINED, subject_type="containment", subject_id=row.pk, via=via,
                     incident_id=incident_id, workspace=row.workspace, reason="contained after the flag",
                     data={"source": row.source_id, "facts": row.facts, "seconds": row.seconds})
    return row


def _radius_ids(graph: Graph, source_id: str) -> list[int]:
    from provenance.recording.selectors import ingesters, radius_actions

    return sorted({a[0] for a in radius_actions(graph, source_id, build_mirror=False)}
                  | set(ingesters(graph, source_id)))


def containable(*, graph: Graph, source_id: str) -> dict[int, tuple[str, int]]:
    """The live versions a flag of `source_id` would contain now ({fact id: (key, version)}: the versions
    _mark would mark), read without marking anything."""
    ids = _radius_ids(graph, source_id)
    found: dict[int, tuple[str, int]] = {}
    for i in range(0, len(ids), CHUNK):
        found.update((f.id, (f.key, f.version)) for f in graph.ro_query(cq.CONTAINABLE, {"ids": ids[i:i + CHUNK]}))
    return found


def preview(*, graph: Graph, source_id: str) -> dict:
    """What a flag of `source_id` would contain now: how many versions, and the first of them."""
    found = containable(graph=graph, source_id=source_id)
    return {"facts": len(found), "sample": [{"key": k, "version": v} for k, v in sorted(found.values())[:SAMPLE]]}


def _mark(row: Containment, graph: Graph) -> None:
    ids = _radius_ids(graph, row.source_id)
    marked = []
    for i in range(0, len(ids), CHUNK):
        marked += graph.query(cq.CONTAIN_WRITTEN_BY, {"ids": ids[i:i + CHUNK], "incident": row.incident_id})
    row.contained_at = timezone.now()
    row.seconds = (row.contained_at - row.flagged_at).total_seconds()
    row.facts = len(marked)
    row.sample = sorted([f.key, f.version] for f in marked)[:SAMPLE]
    row.save(update_fields=["contained_at", "seconds", "facts", "sample"])


# --- how it ends -------------------------------------------------------------------------------------------
def replace_with_repair(*, incident_id: int, graph: Graph) -> None:
    """The repair's plan and catch-up are applied (the caller holds the graph): the repaired facts are
    what live reads see from here on. Safe to call again."""
    if Containment.objects.filter(incident_id=incident_id, ended=Containment.Ended.HOLDING).exists():
        graph.query(cq.LIFT, {"incident": incident_id})
        Containment.objects.filter(incident_id=incident_id, ended=Containment.Ended.HOLDING).update(
            ended=Containment.Ended.REPAIRED, ended_at=timezone.now(), end_reason="replaced by the repaired facts")


def settle(*, incident_id: int) -> dict[str, int]:
    """Settle the incident's held effects as its repair left them (in the caller's transaction): those the
    clean run made too (still live) are performed, the rest dropped."""
    held = list(HeldEffect.objects.select_for_update().select_related("workspace")
                .filter(incident_id=incident_id, status=HeldEffect.Status.HELD))
    if not held:
        return {"performed": 0, "dropped": 0}
    graph = workspace_graph(held[0].workspace.name)
    live = {r.id for r in graph.ro_query(cq.EFFECTS_LIVE, {"ids": [h.effect_id for h in held]}) if r.live}
    _perform([h for h in held if h.effect_id in live], graph, HeldEffect.Status.PERFORMED)
    dropped = [h.pk for h in held if h.effect_id not in live]
    HeldEffect.objects.filter(pk__in=dropped).update(status=HeldEffect.Status.DROPPED, settled_at=timezone.now())
    return {"performed": len(held) - len(dropped), "dropped": len(dropped)}


def lift(*, incident_id: int, actor, reason: str, via: str) -> bool:
    """A false alarm: take the incident's marks off (each node as it was before the flag) and release its
    held effects as they were asked for. False: nothing was held."""
    with transaction.atomic():
        row = (Containment.objects.select_for_update().select_related("workspace")
               .filter(incident_id=incident_id).first())
        if row is None or row.ended == Containment.Ended.FALSE_ALARM:
            return False
        graph = workspace_graph(row.workspace.name)
        if row.ended == Containment.Ended.HOLDING:
            graph.query(cq.LIFT, {"incident": incident_id})
        held = list(HeldEffect.objects.select_for_update().filter(incident_id=incident_id,
                                                                   status=HeldEffect.Status.HELD))
        _perform(held, graph, HeldEffect.Status.RELEASED)
        row.ended, row.ended_at, row.ended_by, row.end_reason = Containment.Ended.FALSE_ALARM, timezone.now(), actor, reason
        row.save(update_fields=["ended", "ended_at", "ended_by", "end_reason"])
        trail.record(action=AuditAction.CONTAINMENT_ENDED, subject_type="containment", subject_id=row.pk, via=via,
                     actor=actor, reason=reason, incident_id=incident_id, workspace=row.workspace,
                     data={"source": row.source_id, "released": len(held)})
    return True


def end_with_run(*, workspace: Workspace) -> None:
    """A desk run replaces the graph the workspace's containments marked: they end with it, and the
    effects they held (of work the new run records again) are dropped."""
    now = timezone.now()
    Containment.objects.filter(workspace=workspace, ended=Containment.Ended.HOLDING).update(
        ended=Containment.Ended.RUN_REPLACED, ended_at=now, end_reason="the desk run was replaced")
    HeldEffect.objects.filter(workspace=workspace, status=HeldEffect.Status.HELD).update(
        status=HeldEffect.Status.DROPPED, settled_at=now)


def _perform(held: list[HeldEffect], graph: Graph, status: str) -> None:
    from provenance.recording.effects import dispatch_effects

    by_run: defaultdict[tuple[str, int], list] = defaultdict(list)
    for h in held:
        row = {"id": h.effect_id, "action": h.action_id, "kind": h.kind, "ticket": h.ticket or None,
               "amount": h.amount_cents, "currency": h.currency}
        by_run[(h.workspace.name, h.run_number)].append((row, h.details))
    for (workspace, run_number), effects in by_run.items():
        dispatch_effects(workspace=workspace, run_number=run_number, effects=effects)
    if held:
        graph.query(cq.RELEASE_EFFECTS, {"ids": [h.effect_id for h in held]})
        HeldEffect.objects.filter(pk__in=[h.pk for h in held]).update(status=status, settled_at=timezone.now())


# --- what the lead sees ------------------------------------------------------------------------------------
def state_of(*, incident_id: int) -> dict | None:
    """The incident's containment as its page and the API show it (None: the flag predates containment).
    Two queries: the row, and its held effects grouped by status, kind and currency."""
    row = Containment.objects.filter(incident_id=incident_id).select_related("ended_by").first()
    if row is None:
        return None
    effects = {s: 0 for s in HeldEffect.Status.values}
    money: dict[str, int] = {}
    for status, kind, currency, n, cents in (HeldEffect.objects.filter(incident_id=incident_id).order_by()
                                             .values_list("status", "kind", "currency")
                                             .annotate(n=Count("pk"), cents=Sum("amount_cents"))):
        effects[status] += n
        if status == HeldEffect.Status.HELD and kind == "refund":
            money[currency] = money.get(currency, 0) + cents
    return {
        "holding": row.ended == Containment.Ended.HOLDING, "ended": row.ended or None,
        "ended_at": row.ended_at, "ended_by": row.ended_by.get_username() if row.ended_by else None,
        "end_reason": row.end_reason, "contained_at": row.contained_at,
        "flag_to_containment_seconds": row.seconds, "contained_facts": row.facts,
        "sample": [{"key": k, "version": v} for k, v in row.sample],
        "held_effects": effects | {"held_refund_cents": money},
    }


def totals() -> dict:
    """For /metrics: contained versions and held effects of the containments holding now, and the
    flag → containment seconds of every containment."""
    holding = Containment.objects.filter(ended=Containment.Ended.HOLDING)
    return {
        "contained_facts": holding.aggregate(n=Sum("facts"))["n"] or 0,
        "held_effects": HeldEffect.objects.filter(status=HeldEffect.Status.HELD).count(),
        "seconds": list(Containment.objects.filter(seconds__isnull=False).values_list("seconds", flat=True)),
        "pending": holding.filter(contained_at__isnull=True).count(),
    }

