"""Refused attempts to change something leave a record: who tried what, when, from where, and why it was
refused. The record goes to the append-only audit trail (compensation.audit); a refusal changes nothing
else, so it is not an IncidentTransition (that table records status changes of an incident)."""
from __future__ import annotations

import logging

log = logging.getLogger("kintsugi.api.refusals")


def record_refusal(*, actor, via: str, attempted: str, subject_type: str, subject_id, status: int, code: str,
                   message: str, incident_id: int | None = None, workspace=None) -> None:
    """Append a `refused` event to `workspace`'s chain (a Workspace or id; not given: the incident's
    workspace, else the system chain). Never raises: a failing audit write must not turn a 403 into a 500,
    so it is logged instead."""
    actor = actor if actor is not None and actor.is_authenticated else None
    log.info("refused %s (%s %s) for %s: %s", attempted, status, code,
             actor.get_username() if actor else "anonymous", message)
    try:
        from compensation import audit

        audit.record(action="refused", subject_type=subject_type[:32], subject_id=str(subject_id or "")[:64],
                     via=via, actor=actor, reason=message, incident_id=incident_id,
                     data={"attempted": attempted, "status": status, "code": code},
                     workspace=audit.FROM_INCIDENT if workspace is None else workspace)
    except Exception:
        log.exception("could not record the refusal of %s in the audit trail", attempted)
