"""What flagging a source would do, computed without doing it: the exact repair outcome.

The repair walk writes nothing until its plan is applied, so the walk on the current graph, never
applied, is the exact what-if: the same outcomes, the same invalidated effects; the drafting of its
effects (compensation.receivers answers repairs.signals.walked_without_applying with
compensation.drafting.drafts.draft_planned, the function the real drafting calls) gives the same items and amounts. Model answers the walk and the drafting need go to the shared response cache, so
the real repair afterwards reads the same answers and comes out the same. Nothing is written to the
workspace's graph or tables; the look is recorded as one audit event ("what_if.viewed").

A what-if holds for the desk it was computed on: `desk_fingerprint` names that desk (its run, its
graph's write epoch and append mark, action count and highest ids), so a confirmation page can say
"the desk changed since this what-if" instead of letting a lead commit to an outdated outcome.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from django.db import transaction

from core.audit import trail
from core.vocabulary import AuditAction
from provenance.recording import containment
from provenance.graph import queries, top_ids
from provenance.access import tenancy
from provenance import validation
from provenance.graph.graph import workspace_graph
from provenance.llm import get_client
from provenance.models import Source, Workspace
from provenance.progress import ProgressFn, noop
from provenance.recording.recorder import UnknownSource
from provenance.vocabulary import COUNT_KEYS, ActionStatus
from repairs.walks import walk_incident
from repairs.models import Incident, RepairEffect
from repairs.signals import walked_without_applying

WHAT_IF_KEYS = ("source", "blast_radius", "counts", "effects_invalidated", "compensations", "amount_reversed",
                "tickets_changed", "containment")


@dataclass
class WhatIf:
    """The outcome flagging `source` would have, on the desk named by `fingerprint`."""

    workspace: str
    source: str
    fingerprint: str
    blast_radius: int
    counts: dict[str, int]
    effects_invalidated: int
    effects_by_kind: dict[str, int]
    compensations: int
    amount_reversed: dict[str, int]  # integer hundredths per currency, as every JSON amount in kintsugi
    amount_paid: dict[str, int]  # replacement refunds the repair would hold for approval
    tickets_changed: list[dict]
    items: list[dict] = field(default_factory=list)
    # What the flag would contain at once (provenance.recording.containment): {"facts": n, "sample": [{key, version}]}.
    containment: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """The `what_if --json` shape; the keys flag_source --json shares mean the same there."""
        return {k: getattr(self, k) for k in WHAT_IF_KEYS}

    def to_json(self) -> dict:
        return asdict(self)


def desk_fingerprint(workspace: Workspace) -> str:
    """A short name for the desk as it stands: changes with any recording, repair or desk run."""
    graph = workspace_graph(workspace.name)
    epoch, hwm, _ = graph.stamp()
    count = graph.ro_query(queries.ACTION_COUNT)[0].n
    a, f, e = top_ids.max_ids(graph)
    repaired = Incident.objects.filter(workspace=workspace, run_number=workspace.run_number,
                                       finished_at__isnull=False).count()
    raw = f"{workspace.run_number}:{epoch}:{hwm}:{count}:{a or 0}:{f or 0}:{e or 0}:{repaired}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def walk_without_applying(*, incident: Incident, progress: ProgressFn = noop) -> dict:
    """The repair walk of an incident not yet opened (an unsaved Incident), as a plan never applied.
    The what-if's only call into the walk: the repair job's own (repairs.walks.walk_incident, with the
    sources the job would leave out), so the two cannot drift."""
    return walk_incident(incident, progress=progress).to_json()


def _tickets_changed(outcomes: list[dict]) -> list[dict]:
    """Each ticket whose decision (the decision with a "choice", as export_state reads it) a re-run changes.
    A re-run that wrote other facts or effects but returned the very same decision is `rerun_changed`
    too; its ticket's decision did not change, so it is not listed."""
    seen: dict[str, dict] = {}
    for o in sorted(outcomes, key=lambda o: o["seq"]):
        before, after = o.get("before") or {}, o.get("after") or {}
        if (o["ticket"] and o["status"] == ActionStatus.RERUN_CHANGED and "choice" in before and before != after
                and o["ticket"] not in seen):
            seen[o["ticket"]] = {"ticket": o["ticket"], "action_id": o["action_id"], "agent": o["agent"],
                                 "before": before, "after": after}
    return [seen[t] for t in sorted(seen)]


def compute_what_if(*, workspace: Workspace, source: str, progress: ProgressFn = noop) -> WhatIf:
    """The outcome of flagging `source` now, without flagging it (see the module docstring)."""

    validation.source_id(source)
    if not Source.objects.filter(workspace=workspace, source_id=source).exists():
        raise UnknownSource(f"unknown source {source!r} in workspace {workspace.name!r}")
    fingerprint = desk_fingerprint(workspace)
    contains = containment.preview(graph=workspace_graph(workspace.name), source_id=source)
    unopened = Incident(workspace=workspace, run_number=workspace.run_number, source_id=source)
    plan = walk_without_applying(incident=unopened, progress=progress)
    get_client().flush()  # the re-runs' answers, for the real repair (and its baseline) to read
    effects = plan["effects"]
    compensations, reversed_, paid, items = 0, defaultdict(int), defaultdict(int), []
    for _, made in walked_without_applying.send(sender=Incident, incident=unopened, effects=effects):
        compensations += made["compensations"]
        for total, amounts in ((reversed_, made["amount_reversed"]), (paid, made["amount_paid"])):
            for currency, cents in amounts.items():
                total[currency] += cents
        items += made["items"]
    invalidated = [e for e in effects if e["role"] == RepairEffect.Role.INVALIDATED]
    by_kind: dict[str, int] = defaultdict(int)
    for e in invalidated:
        by_kind[e["kind"]] += 1
    return WhatIf(
        workspace=workspace.name, source=source, fingerprint=fingerprint, blast_radius=plan["blast_radius"],
        counts={k: plan["counts"].get(k, 0) for k in COUNT_KEYS}, effects_invalidated=len(invalidated),
        effects_by_kind=dict(sorted(by_kind.items())), compensations=compensations,
        amount_reversed=dict(sorted(reversed_.items())), amount_paid=dict(sorted(paid.items())),
        tickets_changed=_tickets_changed(plan["outcomes"]),
        items=items,
        containment=contains,
    )


def what_if(*, workspace: Workspace, source: str, actor, via: str, progress: ProgressFn = noop) -> WhatIf:
    """compute_what_if for a person or agent: tenancy checked, the look recorded in the audit trail."""
    if actor is not None:
        tenancy.require_visible(actor, workspace, via=via, what=f"workspace {workspace.name!r}")
    result = compute_what_if(workspace=workspace, source=source, progress=progress)
    with transaction.atomic():
        source_pk = Source.objects.get(workspace=workspace, source_id=source).pk
        trail.record(action=AuditAction.WHAT_IF_VIEWED, subject_type="source", subject_id=source_pk, via=via, actor=actor,
                     reason="what-if before flagging", workspace=workspace.pk,
                     data={"source": source, "fingerprint": result.fingerprint, "blast_radius": result.blast_radius,
                           "counts": result.counts, "compensations": result.compensations,
                           "amount_reversed": result.amount_reversed})
    return result
