"""A flagged source is quarantined in its workspace from the moment it is flagged: a live recording's
ingest of it gets no content (in-process `rec.ingest` returns None, as for an excluded source; the
protocol answers `{"content": null, "quarantined": true, "incident": ID}`), so its text never reaches
memory or a prompt again, and a model answer cached from its text can never be served to a new action
(the cache key covers the prompt's input).

Each refused ingest is counted on the quarantine (shown with its incident) and audited, at most one
event per source every QUARANTINE_AUDIT_SECONDS carrying the attempts since the last one, so an agent
retrying in a loop cannot flood the audit chain. Only closing the incident as a false alarm lifts it
(repairs.services.close_incident), audited with the lead's reason.

Repairs and their verification do not ask this module: they leave the flagged source out by their own
incident's `excluded` list.
"""
from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Iterable

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.audit import trail
from core.vocabulary import AuditAction
from provenance.models import SourceQuarantine, Workspace

QUARANTINE_AUDIT_SECONDS = 60


def held(*, workspace: Workspace | int) -> dict[str, int]:
    """The workspace's quarantined sources: {source_id: incident id} (the latest flag of each)."""
    ws_id = workspace.pk if isinstance(workspace, Workspace) else workspace
    rows = (SourceQuarantine.objects.filter(workspace_id=ws_id, lifted_at__isnull=True)
            .order_by("incident_id").values_list("source_id", "incident_id"))
    return dict(rows)


def attempts_of(*, incident_id: int) -> int | None:
    """How many ingests of the incident's source were refused (None: the incident quarantined nothing)."""
    return SourceQuarantine.objects.filter(incident_id=incident_id).values_list("attempts", flat=True).first()


def quarantine_source(*, workspace: Workspace, source_id: str, incident_id: int, actor, reason: str,
                      via: str) -> SourceQuarantine:
    """Hold `source_id` out of the workspace's live recordings; called in the flag's own transaction."""
    with transaction.atomic():
        row = SourceQuarantine.objects.create(workspace=workspace, source_id=source_id, incident_id=incident_id)
        trail.record(action=AuditAction.SOURCE_QUARANTINED, subject_type="quarantine", subject_id=row.pk, via=via, actor=actor,
                     reason=reason, incident_id=incident_id, workspace=workspace, data={"source": source_id})
    return row


def record_attempts(*, workspace: Workspace | int, hits: Iterable[tuple[str, int]], via: str,
                    agent: str | None = None) -> None:
    """Count refused ingests (`hits`: (source, incident) per attempt) and audit them, throttled."""
    counts = Counter(incident for _, incident in hits)
    if not counts:
        return
    ws_id = workspace.pk if isinstance(workspace, Workspace) else workspace
    now = timezone.now()
    with transaction.atomic():
        for incident_id, n in sorted(counts.items()):
            SourceQuarantine.objects.filter(incident_id=incident_id).update(attempts=F("attempts") + n,
                                                                            last_attempt_at=now)
            row = SourceQuarantine.objects.select_for_update().filter(incident_id=incident_id).first()
            if row is None:
                continue
            if row.last_audited_at and row.last_audited_at > now - timedelta(seconds=QUARANTINE_AUDIT_SECONDS):
                continue
            trail.record(action=AuditAction.SOURCE_QUARANTINE_REFUSED, subject_type="quarantine", subject_id=row.pk,
                         via=via, incident_id=incident_id, workspace=ws_id,
                         reason=f"an ingest of the quarantined source{f' by agent {agent}' if agent else ''}",
                         data={"source": row.source_id, "attempts": row.attempts - row.audited_attempts,
                               "total": row.attempts})
            row.audited_attempts, row.last_audited_at = row.attempts, now
            row.save(update_fields=["audited_attempts", "last_audited_at"])


def lift(*, incident_id: int, actor, reason: str, via: str) -> bool:
    """Let the incident's source be read again (the incident was a false alarm). False: nothing held."""
    with transaction.atomic():
        row = (SourceQuarantine.objects.select_for_update().select_related("workspace")
               .filter(incident_id=incident_id, lifted_at__isnull=True).first())
        if row is None:
            return False
        row.lifted_at, row.lifted_by, row.lift_reason = timezone.now(), actor, reason
        row.save(update_fields=["lifted_at", "lifted_by", "lift_reason"])
        trail.record(action=AuditAction.SOURCE_QUARANTINE_LIFTED, subject_type="quarantine", subject_id=row.pk, via=via,
                     actor=actor, reason=reason, incident_id=incident_id, workspace=row.workspace,
                     data={"source": row.source_id, "attempts": row.attempts})
    return True


def state_of(*, incident_id: int) -> dict | None:
    """The incident's quarantine as the incident page and the API show it (None: it quarantined nothing)."""
    row = SourceQuarantine.objects.filter(incident_id=incident_id).select_related("lifted_by").first()
    if row is None:
        return None
    return {"held": row.lifted_at is None, "attempts": row.attempts, "last_attempt_at": row.last_attempt_at,
            "lifted_at": row.lifted_at, "lifted_by": row.lifted_by.get_username() if row.lifted_by else None,
            "lift_reason": row.lift_reason}
