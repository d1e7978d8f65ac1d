"""A large repair walked in parts: split the radius (repairs.parallel says how), let every worker walk
whichever parts nobody has taken, and join the parts' plans when they turned out not to need each
other. The repair job (repairs.job) calls walk_in_parts() from its walk step; a part's task calls
walk_part()."""
from __future__ import annotations

import logging
import os
import socket
import time

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from core import locks
from core.bulk import copy_rows
from core.locks import advisory_lock
from provenance import queries
from provenance.graph import Graph, workspace_graph
from provenance.llm import get_client
from provenance.selectors import ingesters, radius_actions_in_graph
from repairs import parallel
from repairs.engine import compute_plan, repair_session
from repairs.faults import fault_point
from repairs.models import Incident, RepairPart, RepairPartChunk
from repairs.steps import CHUNK

log = logging.getLogger(__name__)
# A part's long lists, kept in RepairPartChunk, and how many of their items a chunk holds (a step is
# itself a chunk of up to CHUNK graph rows).
OUT_OF_LINE = {"outcomes": CHUNK, "effects": CHUNK, "steps": 1, "upstream": CHUNK}


def walk_in_parts(incident: Incident, graph: Graph) -> dict | None:
    """The plan walked in parts, or None when the radius is small, does not split, or its parts turned
    out to depend on each other. A part is walked by whoever takes its lock first: this worker takes
    every part nobody else has, and waits for the rest."""
    parts = list(incident.parts.order_by("index")) or _split(incident, graph)
    if not parts:
        return None
    from repairs.tasks import walk_repair_part  # the tasks call this module

    for part in parts[1:]:
        if part.plan is None:  # optional: when the broker refuses, this worker walks the part itself
            try:
                walk_repair_part.apply_async((incident.pk, part.index), retry=False)
            except Exception as exc:  # noqa: BLE001 - any broker failure; the part is not lost, only not shared
                log.warning("incident %s: could not hand part %s to another worker: %s", incident.pk, part.index, exc)
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


def _split(incident: Incident, graph: Graph) -> list[RepairPart]:
    # The radius from one algo.BFS in FalkorDB rather than the topology mirror: a split happens once per
    # large repair, and the mirror's first read of a big desk would cost more than it saves here.
    radius = [r.id for r in radius_actions_in_graph(graph, incident.source_id)]
    if len(radius) < settings.KINTSUGI_REPAIR_PARALLEL_MIN:
        return []
    live = set(radius)
    masked = [a for a in ingesters(graph, incident.source_id) if a in live]
    keys = graph.ro_query(queries.ACTION_KEYS, {"ids": list(dict.fromkeys(masked + radius))})
    top = graph.ro_query(queries.MAX_IDS)[0]
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
    from repairs.job import excluded_sources  # the job calls this module

    with advisory_lock(locks.REPAIR_PART, part_id, wait=False) as mine:
        if not mine:
            return False
        part = RepairPart.objects.select_related("incident__workspace").filter(pk=part_id).first()
        if part is None or part.plan is not None:
            return part is not None
        graph = workspace_graph(part.incident.workspace.name)
        session = repair_session(part.incident, graph, excluded_sources(part.incident))
        session.number_from(*part.id_base)
        started = time.monotonic()
        plan = compute_plan(graph=graph, session=session, source=part.incident.source_id, incident=part.incident_id,
                            progress=PartProgress(part), only=part.action_ids, mask=part.index == 0)
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


class PartProgress:
    """A part's progress, summed over all parts into the incident's for the admin's bar (at most every
    0.3 s, and always at the end)."""

    def __init__(self, part: RepairPart):
        self.part_id, self.incident_id, self.last = part.pk, part.incident_id, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.3:
            return
        self.last = now
        RepairPart.objects.filter(pk=self.part_id).update(progress_done=done, progress_total=total)
        sum_progress(self.incident_id)


def sum_progress(incident_id: int) -> None:
    total = RepairPart.objects.filter(incident_id=incident_id).aggregate(d=Sum("progress_done"), t=Sum("progress_total"))
    Incident.objects.filter(pk=incident_id).update(phase=Incident.Phase.WALKING, progress_done=total["d"] or 0,
                                                   progress_total=total["t"] or 0)
