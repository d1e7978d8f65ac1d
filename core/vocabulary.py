"""The words every layer shares, in one place: where a change came from (`Via`), the roles people hold,
the kinds of compensation item, the roles of a repair's effects, and every action the audit record
knows (`AuditAction`, registered in AUDIT_ACTIONS). Product code names these members, never the bare
strings: tests/test_vocabulary.py fails on a bare one. Kept at the bottom so the audit record, the
services and the entry points name the same values without importing each other."""
from django.db import models


class Via(models.TextChoices):
    ADMIN = "admin"
    API = "api"
    CLI = "cli"
    MCP = "mcp"
    WORKER = "worker"


class IncidentStatus(models.TextChoices):
    OPEN = "open"
    REPAIRING = "repairing"
    REPAIRED = "repaired"
    FAILED = "failed"
    BLOCKED = "blocked"
    CLOSED = "closed"
    # An outage outlasted KINTSUGI_INCIDENT_MAX_ATTEMPTS: still resumable (the sweep resumes it when
    # the store answers again, retry_incident at once), but someone should look.
    NEEDS_ATTENTION = "needs_attention", "needs attention"


class ItemStatus(models.TextChoices):
    """A compensation item's decision state."""
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTED = "executed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class RecordingStatus(models.TextChoices):
    """A remote agent's recording."""
    OPEN = "open"
    COMMITTED = "committed"
    ABANDONED = "abandoned"
    EXPIRED = "expired"


class Role(models.TextChoices):
    """The role groups (their names are the auth groups' names)."""
    SUPPORT_LEAD = "Support lead"
    REVIEWER = "Reviewer"
    AUDITOR = "Auditor"
    WORKSPACE_ADMIN = "Workspace admin"


class ItemKind(models.TextChoices):
    """What a compensation item is (compensation.models explains each)."""
    REFUND_REVERSAL = "refund_reversal", "refund reversal request"
    CORRECTION_EMAIL = "correction_email", "customer correction email"
    REPLACEMENT_REFUND = "replacement_refund", "replacement refund"
    REPLACEMENT_EMAIL = "replacement_email", "replacement email"
    MANUAL_COMPENSATION = "manual_compensation", "manual compensation"


class EffectRole(models.TextChoices):
    """What a repair did to an effect: invalidated it, produced it as a replacement, or cancelled it."""
    INVALIDATED = "invalidated"
    REPLACEMENT = "replacement"
    CANCELLED = "cancelled"


class AuditAction(models.TextChoices):
    """Every action an audit event may record."""
    # incidents: one per status an incident moves to
    INCIDENT_FLAGGED = "incident.flagged"
    INCIDENT_OPEN = "incident.open"
    INCIDENT_REPAIRING = "incident.repairing"
    INCIDENT_REPAIRED = "incident.repaired"
    INCIDENT_FAILED = "incident.failed"
    INCIDENT_BLOCKED = "incident.blocked"
    INCIDENT_CLOSED = "incident.closed"
    INCIDENT_NEEDS_ATTENTION = "incident.needs_attention"
    VERIFICATION_FULL = "verification.full"  # the whole-desk replay of a repair, on demand or on schedule
    # compensation items
    ITEM_DRAFTED = "item.drafted"
    ITEM_REDRAFTED = "item.redrafted"
    ITEM_NEEDS_REDRAFT = "item.needs_redraft"
    ITEM_EDITED = "item.edited"
    ITEM_CUSTOMER_SET = "item.customer_set"
    ITEM_APPROVED = "item.approved"
    ITEM_REJECTED = "item.rejected"
    ITEM_REOPENED = "item.reopened"
    ITEM_EXECUTED = "item.executed"
    ITEM_CANCELLED = "item.cancelled"
    ITEM_REFUSED = "item.refused"
    ITEM_APPROVAL_VOIDED = "item.approval_voided"  # changed after its approval: execution refused it
    ITEM_DECISION_UNDONE = "item.decision_undone"  # taken back within the undo window
    FOUR_EYES_RELAXED = "four_eyes.relaxed"
    # delivery of approved items
    CONNECTOR_SET = "connector.set"
    ITEM_DELIVERY_RETRIED = "item.delivery_retried"
    ITEM_DELIVERY_CHANGED = "item.delivery_changed"
    ITEM_DELIVERY_ACKNOWLEDGED = "item.delivery_acknowledged"  # by the team's own agent (agent_pull)
    # the review desk: cases and the policies that decide many items at once
    CASE_ASSIGNED = "case.assigned"
    POLICY_PROPOSED = "policy.proposed"
    POLICY_APPLIED = "policy.applied"
    # the customer message's wording per workspace, and telling reviewers that cases arrived
    MESSAGE_TEMPLATE_CHANGED = "message_template.changed"
    REVIEWERS_NOTIFIED = "reviewers.notified"
    # recordings of remote agents: one per status a recording ends in
    RECORDING_COMMITTED = "recording.committed"
    RECORDING_ABANDONED = "recording.abandoned"
    RECORDING_EXPIRED = "recording.expired"
    # workspaces, their members, sources, tickets, agents
    WORKSPACE_CREATED = "workspace.created"
    WORKSPACE_MOVED = "workspace.moved"
    WORKSPACE_LEFTOVERS_DELETED = "workspace.leftovers_deleted"
    MEMBERSHIP_ADDED = "membership.added"
    MEMBERSHIP_REMOVED = "membership.removed"
    VISIBILITY_ADDED = "visibility.added"
    VISIBILITY_REMOVED = "visibility.removed"
    USER_CREATED = "user.created"
    SOURCE_CREATED = "source.created"
    SOURCE_CHANGED = "source.changed"
    SOURCE_TRUST_SET = "source.trust_set"
    SOURCE_QUARANTINED = "source.quarantined"
    SOURCE_QUARANTINE_REFUSED = "source.quarantine_refused"
    SOURCE_QUARANTINE_LIFTED = "source.quarantine_lifted"
    SOURCE_CONTAINED = "source.contained"
    CONTAINMENT_ENDED = "source.containment_ended"
    TICKET_CREATED = "ticket.created"
    TICKET_CHANGED = "ticket.changed"
    AGENT_REGISTERED = "agent.registered"
    AGENT_CHANGED = "agent.changed"
    AGENT_SECRET_ROTATED = "agent.secret_rotated"
    AGENT_TOKEN_ISSUED = "agent_token.issued"
    AGENT_TOKEN_REVOKED = "agent_token.revoked"
    EFFECT_KIND_DECLARED = "effect_kind.declared"  # how the workspace's agents' own effect kind is compensated
    # a person's API token (provenance.access.tokens)
    API_TOKEN_ISSUED = "api_token.issued"
    API_TOKEN_ROTATED = "api_token.rotated"
    # a home restored from a backup (compensation.restore)
    BACKUP_RESTORED = "backup.restored"
    # looks and refusals
    WHAT_IF_VIEWED = "what_if.viewed"
    REFUSED = "refused"

    @classmethod
    def of_incident(cls, to_status: str, *, flagged: bool = False) -> "AuditAction":
        """The action of an incident's move to `to_status` (its first status: flagged)."""
        return cls.INCIDENT_FLAGGED if flagged else cls(f"incident.{to_status}")

    @classmethod
    def of_recording(cls, status: str) -> "AuditAction":
        return cls(f"recording.{status}")


# Every action declares its subject type and data keys in the event registry (core.audit.actions), and
# core.audit.trail.record() refuses an action outside it (tests/test_audit_actions.py); none is spelled out
# elsewhere, and every one is written by some module (tests/test_vocabulary.py).
AUDIT_ACTIONS: frozenset[str] = frozenset(AuditAction.values)
