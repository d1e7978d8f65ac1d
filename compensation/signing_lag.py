"""Audit rows that stay unsigned: the checkpoint after each commit signs them within a second or so, so
a row still unsigned after KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS means the signer is failing (a missing
key, a full disk, a process killed between commit and signing) and the record's end is unprotected."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from compensation.models import AuditEvent
from core.wording import counted


def stale_unsigned(statuses) -> list[str]:
    """One line per chain (of `statuses`, core.audit.verification.verify_all) whose oldest unsigned row is
    older than the allowed delay."""
    limit = timezone.now() - timedelta(seconds=settings.KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS)
    lines = []
    for status in statuses:
        signed = status.checkpoint.seq if status.checkpoint else 0
        oldest = (AuditEvent.objects.filter(workspace_id=status.workspace_id, seq__gt=signed).order_by("seq")
                  .values_list("seq", "at").first())
        if oldest and oldest[1] < limit:
            count = AuditEvent.objects.filter(workspace_id=status.workspace_id, seq__gt=signed).count()
            lines.append(f"{status.name}: {counted(count, 'row')} from seq {oldest[0]} (at {oldest[1].isoformat()}) unsigned "
                         f"for longer than {settings.KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS:g} s; check the signing key "
                         f"and run `manage.py verify_audit` again once signing works")
    return lines
