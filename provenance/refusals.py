"""Refused attempts to change something leave a record: who tried what, when, from where, and why it was
refused. The record goes to the append-only audit trail (core.audit); a refusal changes nothing
else, so it is not an IncidentTransition (that table records status changes of an incident)."""
from __future__ import annotations

import logging

from core import audit
from core.vocabulary import AuditAction
from provenance.tenancy import home_workspaces

log = logging.getLogger("kintsugi.api.refusals")


def record_refusal(*, actor, via: str, attempted: str, subject_type: str, subject_id, status: int, code: str,
                   message: str, incident_id: int | None = None, workspace=None) -> None:
    """Append a `refused` event: to `workspace`'s chain when given, else to the incident's workspace chain
    when the incident is known; otherwise (an object the actor may not see, or none at all) to the chains
    of the actor's own workspaces, the record of the team the person works in (the system chain for
    someone in none). Never raises: a failing audit write must not turn a 403 into a 500, so it is logged
    instead."""
    actor = actor if actor is not None and actor.is_authenticated else None
    log.info("refused %s (%s %s) for %s: %s", attempted, status, code,
             actor.get_username() if actor else "anonymous", message)
    try:
        fields = dict(action=AuditAction.REFUSED, subject_type=subject_type[:32], subject_id=str(subject_id or "")[:64],
                      via=via, actor=actor, reason=message, incident_id=incident_id,
                      data={"attempted": attempted, "status": status, "code": code})
        if workspace is not None or incident_id is not None:
            audit.record(workspace=audit.FROM_INCIDENT if workspace is None else workspace, **fields)
            return
        for home in home_workspaces(actor) or [None]:
            audit.record(workspace=home, **fields)
    except Exception:
        log.exception("could not record the refusal of %s in the audit trail", attempted)
