"""When a repair's items may be decided, and when an approved one may leave the building.

An item is drafted from the repair's checkpointed plan, which is final: once that plan is applied
(the incident is verifying, or repaired) a reviewer may decide the item, without waiting for the
verification that replays the whole desk. Nothing executes before that verification came out
0 / 0 / 0: an approved item waits, and the repair job enqueues it when the incident is repaired
clean. A repair whose verification found a difference is never repaired (it needs attention) and
executes nothing: its approved items stay held and say why.
"""
from __future__ import annotations

from core.vocabulary import IncidentStatus
from repairs.models import Incident

P = Incident.Phase


def decidable(incident: Incident) -> bool:
    """May a reviewer decide the incident's items now?"""
    return incident.status == IncidentStatus.REPAIRED or (incident.status == IncidentStatus.REPAIRING and incident.phase == P.VERIFYING)


def verified_clean(incident: Incident) -> bool:
    """Has the incident's repair been verified with no difference from the clean run?"""
    v = incident.verification or {}
    return (incident.status in (IncidentStatus.REPAIRED, IncidentStatus.CLOSED) and bool(v)
            and all(v.get(k) == 0 for k in ("facts", "decisions", "effects")))


def execution_wait(incident: Incident) -> str | None:
    """Why an approved item of the incident may not execute yet (None: it may)."""
    if verified_clean(incident):
        return None
    v = incident.verification or {}
    if any(v.get(k) for k in ("facts", "decisions", "effects")) or incident.status in (IncidentStatus.REPAIRED,
                                                                                       IncidentStatus.CLOSED):
        return (f"held: the repair's verification found differences from the clean run (facts {v.get('facts')}, "
                f"decisions {v.get('decisions')}, effects {v.get('effects')}): nothing executes; the incident "
                f"needs attention")
    return "waits for the repair's verification (0 / 0 / 0) before it goes out"
