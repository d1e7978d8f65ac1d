"""Refused attempts to change something leave a record: who tried what, when, from where, and why it was
refused. The record goes to the append-only audit trail (core.audit); a refusal changes nothing
else, so it is not an IncidentTransition (that table records status changes of an incident).

Whose record: the actor's own. A refusal inside a workspace the actor may see (a member without the
role, a four-eyes refusal) goes to that workspace's chain, their own team's record; an attempt on
anything outside it goes to the chains of the actor's own workspaces (the system chain for someone in
none), never to the target's: nothing an outsider does can grow another team's record.

How much: at most KINTSUGI_REFUSALS_PER_MINUTE rows per actor per minute (anonymous callers share one
budget). Beyond that the attempts are counted in the shared cache, not written, and the next row written
for that actor carries the count (`data.unrecorded_before`) however much later it comes, so a flood
leaves one line saying so instead of thousands of rows, and no count is lost.
"""
from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import cache

from core.audit import trail
from core.audit.event import SUBJECT_ID_MAX, AuditEvent
from core.vocabulary import AuditAction
from provenance.access import tenancy
from provenance.access.tenancy import home_workspaces

log = logging.getLogger("kintsugi.api.refusals")


def _budget_key(actor, minute: int) -> str:
    return f"kintsugi:refusals:{actor.pk if actor is not None else 'anonymous'}:{minute}"


def _unrecorded_key(actor) -> str:
    # One tally per actor, not per minute, kept until a written row carries it: a flood followed by a
    # quiet minute (or an hour) is still reported by the next refusal that is written.
    return f"kintsugi:refusals:{actor.pk if actor is not None else 'anonymous'}:unrecorded"


def _take_budget(actor) -> tuple[bool, int]:
    """(may this refusal be written, how many refusals were only counted since the last written one)."""
    limit = settings.KINTSUGI_REFUSALS_PER_MINUTE
    key = _budget_key(actor, int(time.time() // 60))
    cache.add(key, 0, timeout=180)
    tally = _unrecorded_key(actor)
    if cache.incr(key) > limit:
        cache.add(tally, 0, timeout=None)
        cache.incr(tally)
        return False, 0
    counted = cache.get(tally) or 0
    if counted:
        # Take what was read, not the key: refusals counted meanwhile stay for the next row.
        cache.decr(tally, counted)
    return True, counted


def _target_visible(actor, workspace, incident_id) -> tuple[object, bool]:
    """The workspace an attempt aimed at (given, or the incident's) and whether the actor may see it."""
    if actor is None:  # a recording token's refusal names the token's own workspace; anonymous ones none
        return workspace, workspace is not None
    if workspace is None and incident_id is not None:
        Incident = AuditEvent._meta.get_field("incident").related_model  # named by label: no upward import
        workspace = Incident.objects.filter(pk=incident_id).values_list("workspace_id", flat=True).first()
    if workspace is None:
        return None, False
    return workspace, tenancy.may_see(actor, workspace)


def record_refusal(*, actor, via: str, attempted: str, subject_type: str, subject_id, status: int, code: str,
                   message: str, incident_id: int | None = None, workspace=None) -> None:
    """Append a `refused` event to the actor's own record (see the module's docstring). `workspace` (or,
    without it, `incident_id`'s workspace) names what was aimed at; it is written to only when the actor
    may see it. Never raises: a failing audit write must not turn a 403 into a 500, so it is logged
    instead."""
    actor = actor if actor is not None and actor.is_authenticated else None
    log.info("refused %s (%s %s) for %s: %s", attempted, status, code,
             actor.get_username() if actor else "anonymous", message)
    try:
        allowed, unrecorded = _take_budget(actor)
        if not allowed:
            log.warning("refusal of %s for %s counted, not written (over %s a minute)", attempted,
                        actor.get_username() if actor else "anonymous", settings.KINTSUGI_REFUSALS_PER_MINUTE)
            return
        target, own = _target_visible(actor, workspace, incident_id)
        data = {"attempted": attempted, "status": status, "code": code}
        if unrecorded:
            data["unrecorded_before"] = unrecorded
        fields = dict(action=AuditAction.REFUSED, subject_type=subject_type[:32], subject_id=str(subject_id or "")[:SUBJECT_ID_MAX],
                      via=via, actor=actor, reason=message, data=data)
        if own:
            trail.record(workspace=target, incident_id=incident_id, **fields)
            return
        for home in home_workspaces(actor) or [None]:
            trail.record(workspace=home, incident_id=None, **fields)
    except Exception:
        log.exception("could not record the refusal of %s in the audit trail", attempted)
