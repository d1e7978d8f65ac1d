"""A large repair walked in parts: split the radius (repairs.parallel says how), let every worker walk
whichever parts nobody has taken, and join the parts' plans when they turned out not to need each
other. The repair job (repairs.job) calls plan_walk() from its walk step, which walks a small radius
in one piece; a part's task calls walk_part()."""
from __future__ import annotations

import logging
import os
import socket
import time

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from core import locks
from core.broker import send
from core.bulk import copy_rows
from core.locks import advisory_lock
from provenance.graph import queries, top_ids
from provenance.graph.graph import Graph
from provenance.llm import get_client
from provenance.progress import ProgressFn, throttled
from provenance.recording.selectors import ingesters, radius_actions, ticket_ingesters
from repairs import parallel
from repairs.catch_up import snapshot_bound, take_snapshot
from repairs.walks import walk_incident
from repairs.faults import fault_point
from repairs.models import Incident, RepairPart, RepairPartChunk
from repairs.steps import CHUNK

log = logging.getLogger(__name__)
# A part's long lists, kept in RepairPartChunk, and how many of their items a chunk holds (a step is
# itself a chunk of up to CHUNK graph rows).
OUT_OF_LINE = {"outcomes": CHUNK, "effects": CHUNK, "steps": 1, "upstream": CHUNK}


def plan_walk(incident: Incident, graph: Graph, excluded: set[str]) -> dict:
    """The repair plan (repairs.engine) of the actions below a snapshot, walked in parts by several
    workers when the radius is large and splits (those hold the workspace's graph while they walk, and
    their snapshot is what the graph holds when they are done), otherwise in one piece here while the
    desk records on: its snapshot is taken under the graph's lock for an instant (repairs.catch_up),
    and what commits meanwhile is caught up with once the plan is applied. The radius is read once for
    both."""
    plan, radius = None, None
    with advisory_lock(locks.WORKSPACE_GRAPH, incident.workspace_id, wait=True):
        if settings.KINTSUGI_REPAIR_PARTS >= 2:
            parts = list(incident.parts.order_by("index"))
            if not parts:
                # Read as the walk reads it (no mirror built: the apply rewrites the graph right after), once
                # for the split and, when the radius is small or does not split, for the walk.
                radius = radius_actions(graph, incident.source_id, build_mirror=False)
                parts = _split(incident, graph, radius)
            plan = _walk_parts(incident, parts) if parts else None
        if plan is not None:
            plan["snapshot"] = snapshot_bound(graph)
        else:
            # In the same hold as the radius: nothing commits between the two.
            since, reserved = take_snapshot(incident, graph)
    if plan is None:
        plan = walk_incident(incident, graph=graph, excluded=excluded, radius=radius, below=since, id_base=reserved,
                             progress=incident_progress(incident.pk, Incident.Phase.WALKING)).to_json()
        plan.update(snapshot=since, reserved=reserved)
    get_client().flush()  # answers to the re-runs' new inputs, for the baseline and later repairs
    fault_point("walked")
    return plan


def _walk_parts(incident: Incident, parts: list[RepairPart]) -> dict | None:
    """The plan joined from its parts' plans, or None when they turned out to depend on each other. A
    part is walked by whoever takes its lock first: this worker takes every part nobody else has, and
    waits for the rest."""
    from repairs.tasks import walk_repair_part  # the tasks call this module

    for part in parts[1:]:
        if part.plan is None:  # optional: when the broker refuses, this worker walks the part itself
            send(walk_repair_part, incident.pk, part.index, what=f"part {part.index} of incident {incident.pk}",
                 retry=False)
    while pending := list(incident.parts.filter(plan__isnull=True).values_list("pk", flat=True)):
        if not any([walk_part(pk) for pk in pending]):
            time.sleep(0.2)  # every unfinished part is being walked by another worker (its bar moves the incident's)
    parts = list(incident.parts.order_by("index"))
    plans = [whole_plan(p) for p in parts]
    reason = parallel.conflict(plans, [tuple(p.id_base) for p in parts])
    if reason:
        log.warning("incident %s: parts depend on each other (%s); walking the radius in one piece",
                    incident.pk, reason)
        return None
    plan = parallel.join(plans, blast_radius=sum(p["blast_radius"] for p in plans))
    plan["parts"] = [{"index": p.index, "actions": len(p.action_ids), "walked_by": p.walked_by,
                      "seconds": p.seconds} for p in parts]
    return plan


def _split(incident: Incident, graph: Graph, radius: list) -> list[RepairPart]:
    radius = [r.id for r in radius]
    if len(radius) < settings.KINTSUGI_REPAIR_PARALLEL_MIN:
        return []
    live = set(radius)
    if live.intersection(ticket_ingesters(graph, incident.source_id)):
        return []  # ticket work that read the source is re-run, not masked: one walk sees it whole
    masked = [a for a in ingesters(graph, incident.source_id) if a in live]
    keys = graph.ro_query(queries.ACTION_KEYS, {"ids": list(dict.fromkeys(masked + radius))})
    top = top_ids.max_ids(graph)
    groups = parallel.partition(keys, radius, masked, settings.KINTSUGI_REPAIR_PARTS)
    if len(groups) < 2:
        return []
    bases = parallel.id_bases([len(g) for g in groups], ((top.action or 0) + 1, (top.fact or 0) + 1,
                                                         (top.effect or 0) + 1))
    return RepairPart.objects.bulk_create(
        RepairPart(incident=incident, index=i, action_ids=g, id_base=list(b), progress_total=len(g))
        for i, (g, b) in enumerate(zip(groups, bases)))


def walk_part(part_id: int) -> bool:
    """Walk one part unless another worker is walking it. True when the part's plan is there now."""
    with advisory_lock(locks.REPAIR_PART, part_id, wait=False) as mine:
        if not mine:
            return False
        part = RepairPart.objects.select_related("incident__workspace").filter(pk=part_id).first()
        if part is None or part.plan is not None:
            return part is not None
        started = time.monotonic()
        plan = walk_incident(part.incident, id_base=part.id_base, progress=part_progress(part), only=part.action_ids,
                             mask=part.index == 0)
        get_client().flush()
        fault_point(f"part:{part.index}")
        _checkpoint(part, plan.to_json(), walked_by=f"{socket.gethostname()}:{os.getpid()}",
                    seconds=time.monotonic() - started)
        return True


def _checkpoint(part: RepairPart, plan: dict, **fields) -> None:
    """The part's plan with its long lists in chunks of their own rows, all in one transaction: a part
    has a plan (is walked) only once every chunk of it is there."""
    with transaction.atomic():
        part.chunks.all().delete()
        copy_rows(RepairPartChunk, ({"list": name, "index": i // size, "rows": items[i:i + size]}
                                    for name, size in OUT_OF_LINE.items() for items in [_as_list(plan[name])]
                                    for i in range(0, len(items), size)), part_id=part.pk)
        part.plan = {k: v for k, v in plan.items() if k not in OUT_OF_LINE}
        for name, value in fields.items():
            setattr(part, name, value)
        part.save(update_fields=["plan", *fields])


def whole_plan(part: RepairPart) -> dict:
    """A walked part's plan as its walk returned it, long lists read back from their chunks (a plan
    checkpointed with them inline is returned as it is)."""
    plan = dict(part.plan)
    if all(name in plan for name in OUT_OF_LINE):
        return plan
    lists: dict[str, list] = {name: [] for name in OUT_OF_LINE}
    for name, rows in part.chunks.order_by("list", "index").values_list("list", "rows").iterator():
        lists[name].extend(rows)
    plan.update(lists, steps=[tuple(step) for step in lists["steps"]], upstream=dict(lists["upstream"]))
    return plan


def _as_list(value) -> list:
    return list(value.items()) if isinstance(value, dict) else list(value)


def incident_progress(incident_id: int, phase: str) -> ProgressFn:
    """Progress of one phase on the incident, for the admin's bar."""
    return throttled(lambda done, total: Incident.objects.filter(pk=incident_id).update(
        phase=phase, progress_done=done, progress_total=total))


def part_progress(part: RepairPart) -> ProgressFn:
    """A part's progress, summed over all parts into the incident's for the admin's bar."""
    def write(done: int, total: int) -> None:
        RepairPart.objects.filter(pk=part.pk).update(progress_done=done, progress_total=total)
        sum_progress(part.incident_id)

    return throttled(write)


def sum_progress(incident_id: int) -> None:
    total = RepairPart.objects.filter(incident_id=incident_id).aggregate(d=Sum("progress_done"), t=Sum("progress_total"))
    Incident.objects.filter(pk=incident_id).update(phase=Incident.Phase.WALKING, progress_done=total["d"] or 0,
                                                   progress_total=total["t"] or 0)
