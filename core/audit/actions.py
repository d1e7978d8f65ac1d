"""The event registry: what each audit action records. Every action of core.vocabulary.AuditAction declares
the type of its subject and the keys its data may carry; `core.audit.trail.record()` refuses an action
nobody declared, a subject of another type, or a data key the action does not declare, before anything is
written. So the record stays readable by whoever reads it years later (the admin's history, the export):
the same action always speaks of the same kind of thing in the same words.

A key is declared, not required: an event may leave out a key it has nothing to say about (an approval
without a policy). Limits: the values are not checked here; they are whatever the service recorded.
`declare` registers an action of one's own (a test's probe events).
"""
from __future__ import annotations

from dataclasses import dataclass

from core.vocabulary import AuditAction as A

ANY_SUBJECT = "*"  # an action that may speak of any subject (a refusal names what was aimed at)


class EventRefused(ValueError):
    """An audit event the registry does not allow: the service that wrote it must be fixed."""


@dataclass(frozen=True)
class EventSpec:
    action: str
    subject_type: str  # ANY_SUBJECT: whatever the event aims at
    keys: frozenset[str]


EVENTS: dict[str, EventSpec] = {}


def declare(action: str, subject_type: str, keys: tuple[str, ...] = ()) -> EventSpec:
    """Register (or replace) what `action` records."""
    EVENTS[str(action)] = spec = EventSpec(str(action), subject_type, frozenset(keys))
    return spec


def check(action: str, *, subject_type: str, data: dict | None) -> None:
    """EventRefused unless `action` is declared, speaks of a `subject_type` subject, and `data` carries only
    keys it declares."""
    spec = EVENTS.get(str(action))
    if spec is None:
        raise EventRefused(f"audit action {action!r} is not declared in the event registry (core.audit.actions)")
    if spec.subject_type not in (ANY_SUBJECT, subject_type):
        raise EventRefused(f"audit action {action!r} speaks of a {spec.subject_type!r}, not a {subject_type!r}")
    unexpected = sorted(set(data or ()) - spec.keys)
    if unexpected:
        raise EventRefused(f"audit action {action!r} does not declare the data key(s) {', '.join(unexpected)} "
                           f"(it declares: {', '.join(sorted(spec.keys)) or 'none'})")


ITEM = "compensation_item"
DECISION = ("amount_cents", "currency", "edited", "waits_for", "content_hash", "policy")

# --- incidents: one per status an incident moves to, each with its transition row ------------------------
for _action in (A.INCIDENT_FLAGGED, A.INCIDENT_OPEN, A.INCIDENT_REPAIRING, A.INCIDENT_REPAIRED, A.INCIDENT_FAILED,
                A.INCIDENT_BLOCKED, A.INCIDENT_CLOSED, A.INCIDENT_NEEDS_ATTENTION):
    declare(_action, "incident", ("transition",))
declare(A.VERIFICATION_FULL, "incident", ("facts", "decisions", "effects", "actions_rerun", "replay_calls", "seconds"))

# --- compensation items -------------------------------------------------------------------------------------
declare(A.ITEM_DRAFTED, ITEM, ("kind", "ticket", "amount_cents", "currency", "valid", "problems", "drafted_by",
                               "effects", "carried_from", "worker"))
declare(A.ITEM_REDRAFTED, ITEM, ("before", "after", "valid", "problems", "drafted_by", "ticket_found",
                                 "customer_before", "template_version"))
declare(A.REVIEWERS_NOTIFIED, "incident", ("emailed", "webhooks", "cases", "items"))
declare(A.ITEM_NEEDS_REDRAFT, ITEM, ("rejected",))
declare(A.ITEM_EDITED, ITEM, ("changes", "valid", "problems"))
declare(A.ITEM_CUSTOMER_SET, ITEM, ("before", "after"))
declare(A.ITEM_APPROVED, ITEM, DECISION)
declare(A.ITEM_REJECTED, ITEM, ("policy",))
declare(A.ITEM_REOPENED, ITEM, ("rejected", "was_approved_by"))
# The connector adds what it alone knows (the manual record: what a person did, compensation.delivery.connectors).
declare(A.ITEM_EXECUTED, ITEM, ("idempotency_key", "attempts", "delivery", "connector", "reference", "manual",
                                "recorded"))
declare(A.ITEM_CANCELLED, ITEM)
declare(A.ITEM_REFUSED, ITEM, ("attempted", "refusal"))
declare(A.ITEM_APPROVAL_VOIDED, ITEM, ("approved_hash", "now"))
declare(A.ITEM_DECISION_UNDONE, ITEM)
declare(A.FOUR_EYES_RELAXED, ITEM, ("decision", "decision_reason"))

# --- delivery of approved items -----------------------------------------------------------------------------
declare(A.CONNECTOR_SET, "workspace", ("kind", "connector", "options"))
declare(A.MESSAGE_TEMPLATE_CHANGED, "workspace", ("before", "after"))
declare(A.ITEM_DELIVERY_RETRIED, ITEM)
declare(A.ITEM_DELIVERY_CHANGED, ITEM, ("event", "reference", "failure_reason"))
declare(A.ITEM_DELIVERY_ACKNOWLEDGED, ITEM, ("outcome", "reference", "message", "idempotency_key", "token"))

# --- the review desk ----------------------------------------------------------------------------------------
declare(A.CASE_ASSIGNED, "case", ("ticket", "batch"))
declare(A.POLICY_PROPOSED, "review_policy", ("rule", "decision", "cases", "items", "amount_cents"))
declare(A.POLICY_APPLIED, "review_policy", ("rule", "decided", "refusals", "skipped", "decision"))

# --- recordings of remote agents ----------------------------------------------------------------------------
for _action in (A.RECORDING_COMMITTED, A.RECORDING_ABANDONED, A.RECORDING_EXPIRED):
    declare(_action, "recording", ("actions", "effects_announced", "effects_count"))

# --- workspaces, their members, sources, tickets, agents ----------------------------------------------------
declare(A.WORKSPACE_CREATED, "workspace", ("name",))
declare(A.WORKSPACE_MOVED, "workspace", ("from", "to", "graphs"))
declare(A.WORKSPACE_LEFTOVERS_DELETED, "workspace", ("deleted",))
for _action in (A.MEMBERSHIP_ADDED, A.MEMBERSHIP_REMOVED, A.VISIBILITY_ADDED, A.VISIBILITY_REMOVED):
    declare(_action, "workspace", ("workspace", "user", "user_id"))
declare(A.USER_CREATED, "user", ("username", "group", "superuser"))
for _action in (A.SOURCE_CREATED, A.SOURCE_CHANGED):
    declare(_action, "source", ("bytes", "sha256", "trust"))
declare(A.SOURCE_TRUST_SET, "source", ("source",))
declare(A.SOURCE_QUARANTINED, "quarantine", ("source",))
declare(A.SOURCE_QUARANTINE_REFUSED, "quarantine", ("source", "attempts", "total"))
declare(A.SOURCE_QUARANTINE_LIFTED, "quarantine", ("source", "attempts"))
declare(A.SOURCE_CONTAINED, "containment", ("source", "facts", "seconds"))
declare(A.CONTAINMENT_ENDED, "containment", ("source", "released"))
for _action in (A.TICKET_CREATED, A.TICKET_CHANGED):
    declare(_action, "ticket", ("fields",))
for _action in (A.AGENT_REGISTERED, A.AGENT_CHANGED):
    declare(_action, "agent", ("replay_url", "timeout_seconds"))
declare(A.AGENT_SECRET_ROTATED, "agent", ("fingerprint",))
declare(A.AGENT_TOKEN_ISSUED, "agent_token", ("label", "prefix", "agents", "expires_at"))
declare(A.AGENT_TOKEN_REVOKED, "agent_token", ("prefix",))
declare(A.EFFECT_KIND_DECLARED, "effect_kind", ("name", "money", "target", "compensation", "decides", "declared_by",
                                                "before"))

# --- a person's API token, a restored home, looks and refusals ----------------------------------------------
for _action in (A.API_TOKEN_ISSUED, A.API_TOKEN_ROTATED):
    declare(_action, "api_token", ("user", "prefix", "expires_at"))
declare(A.BACKUP_RESTORED, "backup", ("from_database", "manifest_sha256", "rows", "chains_reanchored"))
declare(A.WHAT_IF_VIEWED, "source", ("source", "fingerprint", "blast_radius", "compensations", "amount_reversed",
                                     "counts"))
declare(A.REFUSED, ANY_SUBJECT, ("attempted", "status", "code", "unrecorded_before"))
