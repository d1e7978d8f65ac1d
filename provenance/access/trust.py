"""How far a source, and every fact derived from it, is trusted.

A lead sets each source's trust (trusted / unknown / untrusted). Trust follows lineage: a fact is as
trusted as the least trusted thing it came from — the sources its writer ingested and the facts its
writer read, and so on back. A fact whose writer ingested and read nothing has no one vouching for it:
unknown. Trust is never an automatic flag; it feeds the ranking of sources worth a look and is shown
wherever facts are shown.
"""
from __future__ import annotations

import json
from typing import NamedTuple

from django.contrib.auth import get_user_model
from django.db import transaction

from core.audit import trail
from core.vocabulary import AuditAction
from provenance.access import capabilities, tenancy
from provenance.graph import queries
from provenance import validation
from provenance.graph.graph import Graph
from provenance.models import Source, Workspace

T = Source.Trust
RANK = {T.UNTRUSTED: 0, T.UNKNOWN: 1, T.TRUSTED: 2}


class FactRow(NamedTuple):
    """A fact version of queries.FACT_LINEAGE with its value decoded and its lists sorted."""

    id: int
    key: str
    value: object
    version: int
    seq: float
    active: bool
    writer: int
    writer_status: str
    sources: list[str]
    read: list[int]


def fact_rows(graph: Graph) -> list[FactRow]:
    """Every fact version with its writer's sources and reads, in (seq, version) order."""
    rows = [FactRow(r.id, r.key, json.loads(r.value), r.version, r.seq, r.active, r.writer, r.writer_status,
                    sorted(r.sources or []), sorted(x for x in (r.read or []) if x is not None))
            for r in graph.ro_query(queries.FACT_LINEAGE)]
    return sorted(rows, key=lambda f: (f.seq, f.version, f.id))


def lowest(levels) -> str:
    levels = list(levels)
    return min(levels, key=RANK.__getitem__) if levels else T.UNKNOWN


def fact_trust(*, workspace: Workspace, rows: list[FactRow]) -> dict[int, str]:
    """Trust of each fact version id: the lowest over its writer's sources and the facts it read (which
    were written earlier, so one pass in seq order settles every lineage)."""
    levels = dict(Source.objects.filter(workspace=workspace).values_list("source_id", "trust"))
    out: dict[int, str] = {}
    for f in rows:
        inherited = [levels.get(s, T.UNKNOWN) for s in f.sources] + [out[r] for r in f.read if r in out]
        out[f.id] = lowest(inherited)
    return out


class TrustRefused(PermissionError):
    pass


SET_TRUST = "repairs.flag_source"  # the Support lead's permission: trusting a source is a call like flagging it


def check_may_set_trust(actor) -> None:
    """The role check of set_source_trust, for callers that refuse before reading a request's body. The
    role is asked on every path, the command line's too (its --user is attributed and must hold the role;
    membership is what the command line does not ask)."""
    if actor is None or not isinstance(actor, get_user_model()) or not actor.is_active:
        raise TrustRefused("an active user sets a source's trust")
    if not capabilities.may(actor, "set_trust"):
        raise TrustRefused(f"user {actor.get_username()!r} may not set source trust (Support lead role needed)")


def set_source_trust(*, source: Source, level: str, actor, reason: str, via: str) -> Source:
    """Set how far a source is trusted (a Support lead's call, like flagging), recorded with who and why:
    one `source.trust_set` audit event in the source's workspace chain, from the old level to the new."""
    reason = validation.reason(reason)
    if level not in T.values:
        raise validation.InvalidInput(f"trust must be one of {', '.join(T.values)}")
    if actor is None or not isinstance(actor, get_user_model()) or not actor.is_active:
        raise TrustRefused("an active user sets a source's trust")
    tenancy.require_visible(actor, source.workspace_id, via=via, what=f"source {source.source_id!r}")
    check_may_set_trust(actor)
    with transaction.atomic():
        locked = Source.objects.select_for_update().get(pk=source.pk)
        before = locked.trust
        locked.trust = level
        locked.save(update_fields=["trust"])
        trail.record(action=AuditAction.SOURCE_TRUST_SET, subject_type="source", subject_id=locked.pk, via=via, actor=actor,
                     reason=reason, workspace=locked.workspace_id, from_status=before, to_status=level,
                     data={"source": locked.source_id})
    return locked
