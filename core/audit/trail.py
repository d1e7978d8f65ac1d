"""The audit trail: append-only, hash-chained events for incidents, compensation items and policies.

`record()` is called by services in the same transaction as the change it describes (Zulip's
RealmAuditLog pattern), so a rolled-back change leaves no event and a committed one always has its
event. Each workspace has a chain of its own, and user and membership events form the system chain
(`workspace=None`). Rows are chained: hash = sha256(prev_hash + canonical JSON of the row, its chain
included). Appends to one chain are serialised by a transaction-level advisory lock of that chain
alone, so two workspaces' audited writes never wait on each other, and `seq` is the chain's previous
seq + 1 under that lock: committed rows have no gaps (a rolled-back transaction gives its seq back) and
a deleted row shows as a gap. After commit the new heads are signed into a log outside the database
(core.audit.checkpoints), which is what catches a deleted newest row or a truncated table.
"""
from __future__ import annotations

import json
from collections import defaultdict

from django.db import connection, transaction
from django.utils import timezone

from core import locks
from core.audit import actions, checkpoints, keys
from core.audit.chains import GENESIS, chain_events, row_hash, workspace_id_of
from core.audit.event import AuditEvent
from core.bulk import copy_create

SYSTEM_CHAIN_KEY = 0  # the system chain's lock key; workspace ids start at 1


class _FromIncident:
    """`workspace` not given: the incident's workspace when `incident_id` is, else the system chain."""

    def __repr__(self) -> str:
        return "FROM_INCIDENT"


FROM_INCIDENT = _FromIncident()


def lock_chain(workspace) -> None:
    """Take the append lock of `workspace`'s chain (a Workspace, an id, or None: the system chain) now.
    Services call this before locking their own rows, so every audited transaction takes locks in the
    same order (chain first) and two of them cannot deadlock."""
    ws = workspace_id_of(workspace)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [locks.AUDIT_CHAIN, SYSTEM_CHAIN_KEY if ws is None else ws])


def _event(*, workspace_id: int | None, seq: int, prev: str, at, action: str, subject_type: str, subject_id,
           via: str, actor=None, reason: str = "", incident_id: int | None = None, from_status: str = "",
           to_status: str = "", data: dict | None = None) -> AuditEvent:
    event = AuditEvent(
        workspace_id=workspace_id, seq=seq, at=at, actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else "", via=via or "", subject_type=subject_type,
        subject_id=str(subject_id if subject_id is not None else ""), incident_id=incident_id, action=action,
        from_status=from_status or "", to_status=to_status or "", reason=reason or "",
        data=json.loads(json.dumps(data or {}, sort_keys=True, default=str)), prev_hash=prev,
    )
    event.hash = row_hash(event)
    return event


def _chains_of(events: list[dict], workspace) -> list[int | None]:
    """Each event's chain: its own `workspace` key, else the call's, else its incident's workspace."""
    Incident = AuditEvent._meta.get_field("incident").related_model  # named by label: no upward import

    wanted = [e.get("workspace", workspace) for e in events]
    lookup = {e["incident_id"] for e, w in zip(events, wanted) if w is FROM_INCIDENT and e.get("incident_id")}
    found = dict(Incident.objects.filter(pk__in=lookup).values_list("pk", "workspace_id")) if lookup else {}
    return [found.get(e.get("incident_id")) if w is FROM_INCIDENT else workspace_id_of(w)
            for e, w in zip(events, wanted)]


def record_many(events: list[dict], *, workspace=FROM_INCIDENT) -> list[AuditEvent]:
    """Append several events (each the keyword arguments of `record`, `workspace` included if they
    differ) in order, one chain lock and one INSERT per chain: a repair drafting thousands of items
    writes its events in milliseconds, not one round trip each. Must run inside the transaction of
    the changes they record; the chains' new heads are signed after it commits. EventRefused, before
    anything is written, for an action the event registry does not know or data keys it does not declare
    (core.audit.actions)."""
    if not events:
        return []
    for event in events:
        actions.check(event["action"], subject_type=event["subject_type"], data=event.get("data"))
    # Fail closed: where a signing key is required (production), no audited change commits unless its
    # checkpoint can be signed; the caller's transaction rolls back with the key's problem as its error.
    keys.require_signer()
    chains = _chains_of(events, workspace)
    by_chain: dict[int | None, list[int]] = defaultdict(list)
    for index, ws in enumerate(chains):
        by_chain[ws].append(index)
    rows: list[AuditEvent | None] = [None] * len(events)
    with transaction.atomic():
        at = timezone.now()
        # Locks in one order (system chain first, then by workspace id): two multi-chain appends cannot deadlock.
        for ws in sorted(by_chain, key=lambda w: -1 if w is None else w):
            lock_chain(ws)
            last = chain_events(ws).order_by("-seq").values_list("seq", "hash").first()
            seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
            for index in by_chain[ws]:
                fields = {k: v for k, v in events[index].items() if k != "workspace"}
                rows[index] = _event(workspace_id=ws, seq=seq, prev=prev, at=at, **fields)
                seq, prev = seq + 1, rows[index].hash
            copy_create([rows[i] for i in by_chain[ws]], with_ids=True)  # COPY, not INSERT: core.bulk
            checkpoints.after_commit(workspace_id=ws)
    return rows


def record(*, action: str, subject_type: str, subject_id, via: str, actor=None, reason: str = "",
           incident_id: int | None = None, from_status: str = "", to_status: str = "",
           data: dict | None = None, workspace=FROM_INCIDENT) -> AuditEvent:
    """Append one event to `workspace`'s chain (a Workspace, an id, or None: the system chain; not given:
    the chain of `incident_id`'s workspace, or the system chain without one). Must run inside the
    transaction of the change it records."""
    return record_many([dict(action=action, subject_type=subject_type, subject_id=subject_id, via=via, actor=actor,
                             reason=reason, incident_id=incident_id, from_status=from_status, to_status=to_status,
                             data=data)], workspace=workspace)[0]
