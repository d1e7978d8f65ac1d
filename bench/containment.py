"""Containment figures for `bench live` and the soak: flag → containment time, the effects held during a
repair and how the repair settled them, and "paid live": effects performed live by recordings that read
the flagged source's versions between the flag and the repair's apply (0 with containment).

The baseline for "paid live" is the same bench with containment off: the bench takes the flag's marks off
right after the flag (the product has no switch to turn it off), so recordings read the poisoned versions
until the repair applies, as before containment.
"""
from __future__ import annotations

from bench import common

# Whether one of a recording's actions read one of the poisoned versions.
READ_POISON = """
MATCH (a:Action)-[:READ]->(f:Fact) WHERE a.id IN $ids AND f.id IN $poisoned
RETURN count(a)
"""
# The recording's effects performed live (not held): its handoffs' too, which act on what the reader read.
PERFORMED = """
MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE a.id IN $ids AND NOT coalesce(e.held, false)
RETURN count(e), sum(CASE WHEN e.kind = 'refund' THEN e.amount ELSE 0 END)
"""


def poisoned_versions(graph, source_id: str) -> list[int]:
    """The fact ids a flag of `source_id` would contain now (its radius's live versions)."""
    from provenance.recording.containment import containable

    return sorted(containable(graph=graph, source_id=source_id))


def paid(graph, action_ids: list[int], poisoned: list[int]) -> tuple[int, int]:
    """(effects, refund cents) performed live by the recording of these actions, if one of them read a
    poisoned version (the triage reads the rules; the refund it hands off to pays)."""
    if not action_ids or not poisoned or not graph.ro_query(READ_POISON, {"ids": action_ids, "poisoned": poisoned})[0][0]:
        return 0, 0
    n, cents = graph.ro_query(PERFORMED, {"ids": action_ids})[0]
    return int(n or 0), int(cents or 0)


def uncontain(workspace: str, incident_id: int) -> None:
    """Containment off for the baseline: the flag's marks taken off at once."""
    from provenance.graph import containment_queries as cq
    from provenance.graph.graph import workspace_graph

    workspace_graph(workspace).query(cq.LIFT, {"incident": incident_id})


def flag_samples(*, workspace, source_id: str, actor, count: int) -> list[float]:
    """Flag → containment seconds of `count` flags of the source, each closed at once as a false alarm
    (which restores the versions exactly), taken while the desk records."""
    from provenance.models import Containment
    from repairs.models import Incident
    from repairs.services import close_incident, flag_source

    seconds = []
    for n in range(count):
        incident = flag_source(workspace=workspace, source_id=source_id, actor=actor, reason=f"bench sample {n}",
                               via=Incident.Via.CLI)
        row = Containment.objects.get(incident_id=incident.pk)
        if row.seconds is not None:
            seconds.append(row.seconds)
        close_incident(incident=incident, actor=actor, reason="bench sample", via=Incident.Via.CLI, false_alarm=True)
    return seconds


def figures(incident_ids: list[int]) -> dict:
    """Flag → containment seconds of these incidents' containments, and their held effects by status."""
    from django.db.models import Count

    from provenance.models import Containment, HeldEffect

    seconds = list(Containment.objects.filter(incident_id__in=incident_ids, seconds__isnull=False)
                   .values_list("seconds", flat=True))
    held = dict(HeldEffect.objects.filter(incident_id__in=incident_ids).order_by().values_list("status")
                .annotate(n=Count("pk")))
    return {"containments": Containment.objects.filter(incident_id__in=incident_ids).count(),
            "not_contained": Containment.objects.filter(incident_id__in=incident_ids, seconds__isnull=True).count(),
            "seconds": seconds, "p50_s": common.median(seconds), "p99_s": common.pct(seconds, 99),
            "max_s": max(seconds, default=float("nan")), "held": sum(held.values()),
            "performed": held.get("performed", 0), "dropped": held.get("dropped", 0),
            "released": held.get("released", 0), "still_held": held.get("held", 0)}
