"""A repair walked in parts by several workers (repairs.parallel has the splitting and the joining).

The worker running the repair splits the radius into RepairPart rows and enqueues a helper task per
part, then claims parts itself: a part is walked by whoever takes its advisory lock first, so with one
worker the repairing worker walks every part in turn, and with more the parts are walked at once. A
part's plan is its checkpoint: a worker killed mid-part releases the lock and the part is walked again;
a finished part is never walked twice, even when the repair itself is resumed.
"""
from __future__ import annotations

import logging
import os
import socket
import time

from django.conf import settings
from django.db.models import Sum

from kintsugi_site import locks
from provenance import queries
from provenance.graph import Graph, workspace_graph
from provenance.llm import get_client
from provenance.selectors import ingesters, radius_actions
from repairs import parallel
from repairs.engine import compute_plan
from repairs.models import Incident, RepairPart
from repairs.runtime import Progress, advisory_lock, excluded_sources, fault_point, repair_session

log = logging.getLogger(__name__)
PART_LOCK = locks.REPAIR_PART  # advisory lock namespace: (PART_LOCK, part id) is held while a part is walked
WAIT_SECONDS = 0.2


class _PartProgress(Progress):
    """A part's progress, summed over all parts into the incident's for the admin's bar."""

    def __init__(self, part: RepairPart):
        super().__init__(part.incident_id, "walking")
        self.part_id = part.pk

    def write(self, done: int, total: int) -> None:
        RepairPart.objects.filter(pk=self.part_id).update(progress_done=done, progress_total=total)
        _sum_progress(self.incident_id)


def _sum_progress(incident_id: int) -> None:
    total = RepairPart.objects.filter(incident_id=incident_id).aggregate(d=Sum("progress_done"), t=Sum("progress_total"))
    Incident.objects.filter(pk=incident_id).update(phase="walking", progress_done=total["d"] or 0,
                                                   progress_total=total["t"] or 0)


def _split(incident: Incident, graph: Graph) -> list[RepairPart]:
    radius = [r[0] for r in radius_actions(graph, incident.source_id)]
    if len(radius) < settings.KINTSUGI_REPAIR_PARALLEL_MIN:
        return []
    live = set(radius)
    masked = [a for a in ingesters(graph, incident.source_id) if a in live]
    groups = parallel.partition(graph, radius, masked, settings.KINTSUGI_REPAIR_PARTS)
    if len(groups) < 2:
        return []
    a, f, e = graph.ro_query(queries.MAX_IDS)[0]
    bases = parallel.id_bases([len(g) for g in groups], ((a or 0) + 1, (f or 0) + 1, (e or 0) + 1))
    return RepairPart.objects.bulk_create(
        RepairPart(incident=incident, index=i, action_ids=g, id_base=list(b), progress_total=len(g))
        for i, (g, b) in enumerate(zip(groups, bases)))


def parallel_plan(incident: Incident, graph: Graph, *, supersede: bool = True) -> dict | None:
    """The repair plan walked in parts, or None when the radius is small, does not split, or its parts
    turned out to depend on each other (the caller then walks it in one piece)."""
    if settings.KINTSUGI_REPAIR_PARTS < 2:
        return None
    parts = list(incident.parts.order_by("index")) or _split(incident, graph)
    if not parts:
        return None
    from repairs.tasks import walk_repair_part  # the tasks module imports the services that import this

    for part in parts[1:]:
        if part.plan is None:
            walk_repair_part.delay(incident.pk, part.index)
    while True:
        pending = list(RepairPart.objects.filter(incident=incident, plan__isnull=True).values_list("pk", flat=True))
        if not pending:
            break
        if not any([walk_part(pk, supersede=supersede) for pk in pending]):
            _sum_progress(incident.pk)
            time.sleep(WAIT_SECONDS)  # every unfinished part is being walked by another worker
    parts = list(incident.parts.order_by("index"))
    plans = [p.plan for p in parts]
    reason = parallel.conflict(plans, [tuple(p.id_base) for p in parts])
    if reason:
        log.warning("incident %s: parts depend on each other (%s); walking the radius in one piece",
                    incident.pk, reason)
        return None
    plan = parallel.join(plans, blast_radius=sum(p["blast_radius"] for p in plans))
    plan["parts"] = [{"index": p.index, "actions": len(p.action_ids), "walked_by": p.walked_by,
                      "seconds": p.seconds} for p in parts]
    return plan


def walk_part(part_id: int, *, supersede: bool = True) -> bool:
    """Walk one part unless another worker is walking it. True when the part's plan is there now."""
    with advisory_lock(PART_LOCK, part_id, wait=False) as mine:
        if not mine:
            return False
        part = RepairPart.objects.select_related("incident__workspace").filter(pk=part_id).first()
        if part is None:
            return False
        if part.plan is not None:
            return True
        incident = part.incident
        graph = workspace_graph(incident.workspace.name)
        session = repair_session(incident, graph, excluded_sources(incident))
        session.next_action, session.next_fact, session.next_effect = part.id_base
        started = time.monotonic()
        plan = compute_plan(graph=graph, session=session, source=incident.source_id, incident=incident.pk,
                            progress=_PartProgress(part), supersede=supersede, only=part.action_ids,
                            mask=part.index == 0)
        get_client().flush()
        fault_point(f"part:{part.index}")
        part.plan = plan.to_json()
        part.walked_by = f"{socket.gethostname()}:{os.getpid()}"
        part.seconds = time.monotonic() - started
        part.save(update_fields=["plan", "walked_by", "seconds"])
        return True
