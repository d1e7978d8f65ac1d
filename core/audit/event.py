"""The audit record's row: one append-only event of a workspace's hash chain (or the system chain).

The model is defined in the bottom layer so that every app can write the record without importing the
apps above it; it keeps the `compensation` app label, so its table, migrations and permissions are
unchanged (compensation.models imports it, which registers it)."""
from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models

from core.vocabulary import Via

# The longest id an event's subject has: a source id (provenance.validation.SOURCE_ID_MAX), which the
# API, MCP and the command line accept up to this length.
SUBJECT_ID_MAX = 200


class AuditEvent(models.Model):
    """One state change of an incident, a compensation item or a policy: who, what, when, why, from where.

    Each workspace has its own chain of these (`workspace`, `seq` 1, 2, ...); user and membership events
    form the system chain (`workspace` null). Append-only: the application's database role may only
    SELECT and INSERT (core.db_roles), triggers refuse UPDATE, DELETE and TRUNCATE to everyone
    else, and every row carries the SHA-256 of its content and of the previous row of its chain, so
    `manage.py verify_audit` detects an edit, a deletion or a reordering made behind the triggers' back
    (by the table owner); deletions of the newest rows and truncation show against the signed
    checkpoints kept outside the database (core.audit.checkpoints)."""

    Via = Via  # one list of the places a change can come from

    # Kept when the workspace goes: the record outlives what it describes.
    workspace = models.ForeignKey("provenance.Workspace", on_delete=models.DO_NOTHING, null=True, blank=True,
                                  related_name="audit_events", db_constraint=False, editable=False,
                                  help_text="The chain this event belongs to; empty: the system chain.")
    seq = models.PositiveBigIntegerField(editable=False, help_text="Position in its chain, from 1.")
    at = models.DateTimeField(editable=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                              related_name="+", db_constraint=False)
    actor_name = models.CharField(max_length=150, blank=True, help_text="Username at the time (kept if the user is renamed).")
    via = models.CharField(max_length=16, choices=Via.choices)
    subject_type = models.CharField(max_length=32)
    subject_id = models.CharField(max_length=SUBJECT_ID_MAX, blank=True)
    incident = models.ForeignKey("repairs.Incident", on_delete=models.DO_NOTHING, null=True, blank=True,
                                 related_name="audit_events", db_constraint=False)
    action = models.CharField(max_length=64)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64, editable=False)
    hash = models.CharField(max_length=64, editable=False)

    class Meta:
        # Defined below the apps that use it; its table, label and migrations stay compensation's.
        app_label = "compensation"
        ordering = ["workspace_id", "seq"]
        permissions = [("export_auditevent", "Can export the audit trail")]
        indexes = [models.Index(fields=["subject_type", "subject_id"])]
        constraints = [
            # One seq per chain; the system chain (NULL workspace) needs its own partial index because
            # NULLs never collide in a unique index. Both also serve "the head of this chain".
            models.UniqueConstraint(fields=["workspace", "seq"], condition=models.Q(workspace__isnull=False),
                                    name="audit_seq_unique_per_workspace"),
            models.UniqueConstraint(fields=["seq"], condition=models.Q(workspace__isnull=True),
                                    name="audit_seq_unique_in_system_chain"),
        ]
        triggers = [
            pgtrigger.Protect(name="audit_no_update_delete", operation=pgtrigger.Update | pgtrigger.Delete),
            # TRUNCATE fires no row triggers. The application role lacks the privilege anyway; this stops
            # other roles too, unless they switch triggers off (`flush` does, as the owner: the test runner).
            pgtrigger.Trigger(name="audit_no_truncate", operation=pgtrigger.Truncate, level=pgtrigger.Statement,
                              when=pgtrigger.Before,
                              func="RAISE EXCEPTION 'pgtrigger: Cannot truncate rows from % table', TG_TABLE_NAME;"),
        ]

    def __str__(self) -> str:
        return f"{self.seq} {self.action} {self.subject_type}:{self.subject_id}"
