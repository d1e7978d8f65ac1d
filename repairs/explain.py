"""Why is this action or effect part of a repair? The path from the flagged source, for the admin's
explain page, the API, MCP and the picture, from the edges as they stood before the repair (the repair
rewires the live ones)."""
from __future__ import annotations

import json

from django.db.models.fields.json import KeyTransform

from core.money import format_money
from provenance.graph import paths, queries
from provenance.graph.graph import GraphUnavailable, workspace_graph
from provenance.models import Workspace
from provenance.recording.selectors import whole_seq, workspace_currency
from provenance.vocabulary import ActionStatus
from repairs.models import ActionOutcome, Incident, RepairEffect
from repairs.wording import STATUS_LABELS, describe


# --- edges of the repair, as they stood before it ---------------------------------------------------------
def upstream_map(incident: Incident) -> dict[int, list[tuple[int, str, list]]] | None:
    """{action: [(upstream action, "FEEDS" | "HANDED_OFF", [[key, version], ...]), ...]} from the
    checkpointed plan (repairs.engine.Plan.upstream); None for a plan recorded before it kept them."""
    raw = (Incident.objects.filter(pk=incident.pk).annotate(up=KeyTransform("upstream", "plan"))
           .values_list("up", flat=True).first())
    if raw is None:
        return None
    return {int(k): [(e[0], e[1], e[2]) for e in v] for k, v in raw.items()}


def _fallback_upstream(outcomes: dict[int, ActionOutcome]) -> dict[int, list]:
    # Plans from before Plan.upstream: handoffs are still known from parent_id; FEEDS edges are not.
    return {aid: [(o.parent_id, "HANDED_OFF", [])] for aid, o in outcomes.items()
            if o.parent_id is not None and o.parent_id in outcomes}


# --- "why is this here?" ----------------------------------------------------------------------------------
class NotInIncident(LookupError):
    pass


def effect_in_incident(incident: Incident, effect_id: int) -> dict:
    """An effect of the radius with its state now (live, held for approval, invalidated) and its cause."""
    row = incident.effects.filter(effect_id=effect_id).first()
    try:
        found = workspace_graph(incident.workspace.name).ro_query(queries.EFFECT_CAUSER, {"id": effect_id})
    except GraphUnavailable:
        found = []
    if found:
        cause = found[0]
        aid, kind, ticket, amount, currency = cause.action, cause.kind, cause.ticket, cause.amount, cause.currency
        state = "invalidated" if not cause.live else ("held" if cause.held else "live")
    elif row is not None:
        aid, kind, ticket, amount, currency = row.action_id, row.kind, row.ticket, row.amount_cents, row.currency
        state = "held" if row.role == RepairEffect.Role.REPLACEMENT else "invalidated"
    else:
        raise NotInIncident(f"effect {effect_id} is not in incident #{incident.pk}")
    return {"effect_id": effect_id, "action_id": aid, "kind": kind, "ticket": ticket or "", "amount_cents": amount,
            "amount": format_money(int(amount or 0), currency or "USD"), "state": state,
            "role": row.role if row is not None else None}


def _fact_values(incident: Incident, pairs: set[tuple[str, int]]) -> dict[tuple[str, int], dict]:
    if not pairs:
        return {}
    try:
        rows = workspace_graph(incident.workspace.name).ro_query(
            queries.FACT_VERSIONS, {"rows": [{"key": k, "version": v} for k, v in sorted(pairs)]})
    except GraphUnavailable:
        return {}
    return {(f.key, f.version): {"value": json.loads(f.value) if f.value else None, "active": f.active}
            for f in rows}


def explain(*, incident: Incident, action_id: int | None = None, effect_id: int | None = None) -> dict:
    """The path from the flagged source to an action (or to the action that caused an effect) of this
    incident: a short chain of steps, each with the edge that reached it, the facts it read over that
    edge (with their values) and the handoffs it took. The shortest such chain, from the edges as they
    stood before the repair."""
    if (action_id is None) == (effect_id is None):
        raise ValueError("give an action or an effect")
    effect = effect_in_incident(incident, effect_id) if effect_id is not None else None
    target = effect["action_id"] if effect else action_id
    upstream = upstream_map(incident)
    outcomes = {o.action_id: o for o in incident.outcomes.all()}
    currency = getattr(incident, "currency", None) or workspace_currency(workspace_id=incident.workspace_id)
    if target not in outcomes:
        raise NotInIncident(f"action {target} is not in incident #{incident.pk}")
    if upstream is None:
        upstream = _fallback_upstream(outcomes)
    starts = {aid for aid, o in outcomes.items() if o.status == ActionStatus.POISONED}
    found = paths.shortest_path(starts=starts, target=target, upstream=paths.recorded_upstream(upstream, set(outcomes)))
    if not found:
        return {"incident": incident.pk, "source": incident.source_id, "target": target, "effect": effect,
                "steps": [], "complete": False}
    facts_of = {(aid, pid, kind): facts for aid, edges in upstream.items() for pid, kind, facts in edges}
    chain = [(s.action, s.edge, facts_of.get((s.action, s.from_action, s.edge), [])) for s in found]
    values = _fact_values(incident, {(k, v) for _, _, facts in chain for k, v in facts})
    steps = []
    for i, (aid, kind, facts) in enumerate(chain):
        o = outcomes[aid]
        nxt = chain[i + 1] if i + 1 < len(chain) else None
        writer = chain[i - 1][0] if i else None
        # The step shape of provenance.recording.selectors.explain_path (the API's, on the live graph), plus what
        # the repair did to the step and the values of the facts read.
        steps.append({
            "action": aid, "agent": o.agent, "ticket": o.ticket or None, "seq": whole_seq(o.seq), "status": o.status,
            "status_label": STATUS_LABELS.get(o.status, o.status),
            "before": describe(o.before, currency=currency), "after": describe(o.after, currency=currency),
            "reached_by": {"edge": kind, "from_action": writer,
                           "source": incident.source_id if kind == "INGESTED" else None,
                           "facts": sorted({k for k, _ in facts})},
            "facts_read": [{"key": k, "version": v, "writer": writer, **values.get((k, v), {})} for k, v in facts],
            "handoffs": [nxt[0]] if nxt and nxt[1] == "HANDED_OFF" else [],
        })
    return {"incident": incident.pk, "source": incident.source_id, "target": target, "effect": effect,
            "steps": steps, "complete": True}


def explain_action(*, workspace: Workspace, source: str, action_id: int) -> list[dict]:
    """Why `action_id` depends on `source` — or depended on it, for an action a repair of that source
    took in: the API's and MCP's explain. Before a repair the live graph has the path; after it, the
    repair's recorded edges do (it rewired the live ones). [] when the action never depended on it."""
    incident = (Incident.objects.filter(workspace=workspace, source_id=source, outcomes__action_id=action_id)
                .defer("plan", "verification").order_by("-pk").first())
    if incident is not None:
        steps = explain(incident=incident, action_id=action_id)["steps"]
        if steps:
            return steps
    from provenance.recording.selectors import explain_path

    return explain_path(workspace=workspace.name, source=source, action_id=action_id)
