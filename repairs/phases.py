"""How long a repair spent in each phase: the job notes when it first enters one (enter_phase), and the
incident page, the API and the metrics read the durations from those marks.

A phase lasts from its mark to the mark of the next phase the repair entered (walking → applying →
verifying → done; drafting the review items runs alongside the verification, so it is inside
`verifying`). The phase a repair is in has no duration yet. Marks are written once: a repair resumed
after a crash or an outage keeps the time its first attempt entered the phase, so the duration of the
phase it was interrupted in includes the time it waited."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.utils import timezone

from repairs.models import Incident, IncidentPhase

P = Incident.Phase
# The phases that have a duration, in the order a repair goes through them; `done` only ends the last.
TIMED = (P.WALKING, P.APPLYING, P.VERIFYING)
ORDER = (*TIMED, P.DONE)


def enter_phase(incident_id: int, phase: str) -> None:
    """Mark the moment the incident's repair first entered `phase`; entering it again (a resumed or
    retried repair) keeps the first mark. Python's clock, not the database's: inside one transaction
    Postgres's now() stands still, and every phase would last 0 s."""
    IncidentPhase.objects.bulk_create([IncidentPhase(incident_id=incident_id, phase=phase, entered_at=timezone.now())],
                                      ignore_conflicts=True)


def durations(marks: dict[str, datetime]) -> dict[str, float | None]:
    """Seconds spent in each phase entered (None: still in it), from {phase: when it was entered}."""
    entered = [p for p in ORDER if p in marks]
    return {p: ((marks[entered[i + 1]] - marks[p]).total_seconds() if i + 1 < len(entered) else None)
            for i, p in enumerate(entered) if p in TIMED}


def timings(incident: Incident) -> dict[str, dict]:
    """{phase: {"started_at", "seconds"}} for the phases the repair has entered, in their order (seconds
    None for the one it is in). Reads `incident.phase_marks` (prefetch it for a list)."""
    marks = {m.phase: m.entered_at for m in incident.phase_marks.all()}
    return {p: {"started_at": marks[p].isoformat(), "seconds": s} for p, s in durations(marks).items()}


def finished_since(since: datetime) -> dict[str, tuple[int, float]]:
    """(how many, total seconds) of each timed phase over the repairs finished since `since`; a repair
    from before phases were marked counts in none."""
    marks: dict[int, dict[str, datetime]] = defaultdict(dict)
    for incident_id, phase, at in (IncidentPhase.objects.filter(incident__finished_at__gte=since)
                                   .values_list("incident_id", "phase", "entered_at").order_by()):
        marks[incident_id][phase] = at
    totals = {p: (0, 0.0) for p in TIMED}
    for seen in marks.values():
        for phase, seconds in durations(seen).items():
            if seconds is not None:
                n, total = totals[phase]
                totals[phase] = (n + 1, total + seconds)
    return totals
