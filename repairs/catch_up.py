"""Catching up with the desk: the actions committed while a repair walked its snapshot.

A repair walks the actions below its snapshot (the seq bound taken as its walk began, under the
workspace graph's lock for an instant: take_snapshot) holding nothing, so the desk goes on recording.
Once it holds the graph to apply (repairs.job), after the walk's plan is applied, this walks the actions committed
since: those that ingested the flagged source are masked; those fed or handed off by an action the
repair changed, or reading a key it wrote or retired, and everything downstream of them, are re-run
like the rest (each against the snapshot its original read). Their plan is checkpointed after the
walk's (outcomes, effects and steps appended) and applied before the graph is let go, so the incident
is repaired only once every action committed until then is.
"""
from __future__ import annotations

from collections import defaultdict

from django.db import transaction

from core import locks
from core.bulk import copy_rows
from core.locks import advisory_lock
from provenance.graph import containment_queries as cq, queries, top_ids
from provenance.graph.graph import Graph
from provenance.recording.selectors import ingesters
from provenance.vocabulary import CHANGED, COUNT_KEYS, DEAD
from repairs.engine import RepairWalk
from repairs.walks import repair_session
from repairs.faults import fault_point
from repairs.models import ActionOutcome, Incident, RepairEffect, RepairStep

FORCED = -1  # a predecessor standing for "reads a key this repair wrote or retired"


def snapshot_bound(graph: Graph) -> float:
    """The seq every action committed so far is below (and every later commit at or above)."""
    top = top_ids.max_ids(graph)
    return float((top.action or 0) + 1)


def reserve_ids(graph: Graph) -> list[int]:
    """The first action, fact and effect ids a walk beside the recording desk numbers its new ones
    from: far enough above what is committed now that the recordings committed during the walk stay
    below them (checked again before the plan is applied: ids_still_free). The action gap is kept to
    a fraction of the desk, since the topology mirror indexes actions by id."""
    top = top_ids.max_ids(graph)
    action, fact, effect = top.action or 0, top.fact or 0, top.effect or 0
    return [action + max(10_000, action // 2) + 1, fact + max(1_000_000, fact) + 1,
            effect + max(1_000_000, effect) + 1]


def ids_still_free(graph: Graph, reserved: list[int]) -> bool:
    top = top_ids.max_ids(graph)
    return all((now or 0) < first for now, first in zip((top.action, top.fact, top.effect), reserved))


def take_snapshot(incident: Incident, graph: Graph) -> tuple[float, list[int]]:
    """The snapshot a walk in one piece reads (the seq bound of what is committed now) and the ids it
    numbers its new nodes from: taken under the graph's lock for an instant, so no recording is
    half-written meanwhile (re-entrant: a caller holding the lock already keeps it)."""
    with advisory_lock(locks.WORKSPACE_GRAPH, incident.workspace_id, wait=True):
        return snapshot_bound(graph), reserve_ids(graph)


def hold_reserved_ids(incident: Incident, graph: Graph) -> None:
    """Before the walk's plan is applied (the graph held): make sure the desk has not recorded into the
    ids set aside for the repair's new nodes, and keep them set aside, so that recordings committed
    while the repair applies and catches up are numbered above them (until release_ids)."""
    reserved = incident.plan.get("reserved")
    # Set aside already by an attempt of this repair that did not finish applying: recordings since
    # were numbered above them.
    held = graph.ro_query(queries.RESERVED)[0][0] > 0
    if incident.applied_steps == 0 and reserved and not held and not ids_still_free(graph, reserved):
        raise RuntimeError("the desk recorded more during the walk than the ids set aside for the repair's "
                           "new actions, facts and effects; retry the repair")
    if reserved and incident.plan.get("next_ids") and not held:
        graph.query(queries.RESERVE_IDS, dict(zip(("action", "fact", "effect"),
                                                  (n - 1 for n in incident.plan["next_ids"]))))


def release_ids(graph: Graph) -> None:
    graph.query(queries.RELEASE_IDS)


def catch_up(incident: Incident, graph: Graph) -> bool:
    """Once the walk's plan is applied (the graph held): plan and checkpoint the catch-up with what the
    desk committed since the walk's snapshot; True when its steps are to be applied now. A resumed
    repair that checkpointed its catch-up already, and a plan checkpointed with its steps inline (it
    predates walking on a snapshot), have nothing to catch up."""
    since = incident.plan.get("snapshot")
    if since is None or "through" in incident.plan or "steps" in incident.plan:
        return False
    plan = catch_up_plan(incident, graph, incident.excluded_sources(), since)
    through = float(plan["next_ids"][0]) if plan["next_ids"] else snapshot_bound(graph)
    checkpoint_catch_up(incident, plan, through=max(through, snapshot_bound(graph)))
    return True


def catch_up_plan(incident: Incident, graph: Graph, excluded: set[str], since: float) -> dict:
    """The plan for the live actions at or above `since` that depend on what the repair changed."""
    late = [r.id for r in graph.ro_query(queries.ACTIONS_SINCE, {"since": since, "dead": list(DEAD)})]
    # The live actions that read through this incident's containment saw neither the poisoned facts nor
    # the repaired ones: re-run each against the repaired facts (wherever it sits in the desk's order),
    # which settles its held effects. Those the walk itself re-ran are done already.
    walked = set(incident.outcomes.values_list("action_id", flat=True))
    through = [r.id for r in graph.ro_query(cq.READ_THROUGH, {"incident": incident.pk, "dead": list(DEAD)})
               if r.id not in walked]
    late = sorted(set(late) | set(through))
    if not late:
        return {"steps": [], "outcomes": [], "effects": [], "counts": {k: 0 for k in COUNT_KEYS}, "upstream": {},
                "next_ids": []}
    walk = RepairWalk(graph=graph, session=repair_session(incident, graph, excluded), source=incident.source_id,
                      incident=incident.pk)
    walk._load(late)
    walk.changed = set(incident.outcomes.filter(status__in=CHANGED).values_list("action_id", flat=True))
    walk.changed.add(FORCED)
    keys = set(incident.plan.get("writes") or ())
    seeds = []
    for aid in late:
        if keys.intersection(walk.nodes[aid].read_keys):
            walk.preds[aid].add(FORCED)
        if not walk.preds[aid].isdisjoint(walk.changed):
            seeds.append(aid)
    late_set = set(late)
    for aid in through:
        walk.forced.add(aid)
        seeds.append(aid)
    for aid in ingesters(graph, incident.source_id):
        if aid in late_set and walk.nodes[aid].status not in DEAD:
            if walk.nodes[aid].ticket:
                walk.forced.add(aid)  # ticket work is re-run with the source masked, as the walk does
            else:
                walk._mask(aid)
            seeds.append(aid)
    # Downstream of the seeds among the late actions: what the walk would have had in its radius.
    successors: defaultdict[int, list[int]] = defaultdict(list)
    for aid in late:
        for pred in walk.preds[aid]:
            successors[pred].append(aid)
        parent = walk.nodes[aid].parent
        if parent is not None and parent in late_set and aid not in successors[parent]:
            successors[parent].append(aid)
    reached, frontier = set(seeds), list(seeds)
    while frontier:
        frontier = [n for aid in frontier for n in successors[aid] if n not in reached]
        reached.update(frontier)
    return walk.drain(sorted(reached, key=lambda aid: (walk.nodes[aid].seq, aid))).to_json()


def checkpoint_catch_up(incident: Incident, plan: dict, through: float) -> None:
    """Append the catch-up's outcomes, effects and steps to the incident's and say where its
    verification ends (`through`: everything committed below it is repaired)."""
    with transaction.atomic():
        incident = Incident.objects.select_for_update().get(pk=incident.pk)
        first = incident.plan["step_count"]
        copy_rows(ActionOutcome, plan["outcomes"], incident_id=incident.pk)
        copy_rows(RepairEffect, plan["effects"], incident_id=incident.pk)
        copy_rows(RepairStep, ({"index": first + i, "kind": kind, "rows": rows} for i, (kind, rows)
                               in enumerate(plan["steps"])), incident_id=incident.pk)
        counts = {k: (incident.counts or {}).get(k, 0) + plan["counts"].get(k, 0) for k in COUNT_KEYS}
        caught = sum(plan["counts"].values())
        incident.plan.update(step_count=first + len(plan["steps"]), caught_up=caught, through=through,
                             upstream={**incident.plan.get("upstream", {}), **plan["upstream"]},
                             not_rerun=sorted({*incident.plan.get("not_rerun", ()), *plan.get("not_rerun", ())}))
        invalidated = sum(1 for e in plan["effects"] if e["role"] == RepairEffect.Role.INVALIDATED)
        Incident.objects.filter(pk=incident.pk).update(
            plan=incident.plan, counts=counts, blast_radius=(incident.blast_radius or 0) + caught,
            effects_invalidated=(incident.effects_invalidated or 0) + invalidated)
    fault_point("caught_up")
