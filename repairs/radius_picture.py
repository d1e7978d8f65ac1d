"""The blast-radius picture's data: one page of tickets in detail, or the whole radius grouped."""
from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Q, Sum

from provenance.graph import queries
from provenance.graph.graph import GraphUnavailable, workspace_graph
from repairs.explain import upstream_map
from repairs.models import ActionOutcome, Incident, RepairEffect
from repairs.selectors import ticket_page


DETAIL_LIMIT = 80  # above this many actions the picture starts with the grouped overview


def _effects_of(incident: Incident, ids: list[int]) -> list[dict]:
    """Effects of these actions with their state now: live, held (waiting for approval) or invalidated."""
    if not ids:
        return []
    try:
        rows = workspace_graph(incident.workspace.name).ro_query(queries.ACTION_EFFECTS, {"ids": ids})
    except GraphUnavailable:
        rows = None
    if rows is not None:
        return [{"id": e.id, "action": e.action, "kind": e.kind, "ticket": e.ticket or "", "amount": e.amount,
                 "currency": e.currency, "state": "invalidated" if not e.live else ("held" if e.held else "live")}
                for e in rows]
    # FalkorDB unreachable: what Postgres knows (the repair's own effects) is still worth a picture.
    return [{"id": e.effect_id, "action": e.action_id, "kind": e.kind, "ticket": e.ticket, "amount": e.amount_cents,
             "currency": e.currency, "state": {"invalidated": "invalidated", "replacement": "held"}.get(e.role, "invalidated")}
            for e in incident.effects.filter(action_id__in=ids)]


def graph_page(*, incident: Incident, page: int = 1, per_page: int = 12) -> dict:
    """Nodes, edges and effects for one page of the picture: the actions of `per_page` tickets of the
    radius (plus the ticketless ones, such as the research step that read the source, on every page)."""
    page = max(1, page)
    rows = list(ActionOutcome.objects.filter(incident=incident)
                .filter(Q(ticket__in=ticket_page(incident, page, per_page)) | Q(ticket=""))
                .order_by("seq").values("action_id", "agent", "ticket", "seq", "status", "parent_id",
                                        "before", "after"))
    page_tickets = sorted({r["ticket"] for r in rows if r["ticket"]})
    has_next = len(page_tickets) > per_page
    if has_next:
        drop = page_tickets.pop()
        rows = [r for r in rows if r["ticket"] != drop]
    nodes = {r["action_id"]: r for r in rows}
    upstream = upstream_map(incident)
    if upstream is None:
        edges = [(r["parent_id"], r["action_id"], "HANDED_OFF", []) for r in rows if r["parent_id"] in nodes]
    else:
        edges = [(pid, aid, kind, facts) for aid in nodes for pid, kind, facts in upstream.get(aid, ())
                 if pid in nodes]
    return {"nodes": rows, "edges": edges, "effects": _effects_of(incident, sorted(nodes)), "page": page,
            "has_next": has_next, "has_previous": page > 1, "tickets": page_tickets, "source": incident.source_id}


def graph_overview(*, incident: Incident) -> dict:
    """The whole radius grouped by (agent, status), with edge and effect counts between groups."""
    group_of: dict[int, tuple[str, str]] = {}
    groups: dict[tuple[str, str], int] = defaultdict(int)
    first_seq: dict[str, float] = {}
    for aid, seq, agent, st in ActionOutcome.objects.filter(incident=incident).values_list(
            "action_id", "seq", "agent", "status"):
        group_of[aid] = (agent, st)
        groups[(agent, st)] += 1
        first_seq[agent] = min(first_seq.get(agent, seq), seq)
    edges: dict[tuple, int] = defaultdict(int)
    for aid, ins in (upstream_map(incident) or {}).items():
        for pid, kind, _ in ins:
            if pid in group_of and aid in group_of:
                edges[(group_of[pid], group_of[aid], kind)] += 1
    try:
        rows = workspace_graph(incident.workspace.name).ro_query(queries.EFFECT_STATES, {"ids": sorted(group_of)})
        effects = [{"kind": e.kind, "state": "invalidated" if not e.live else ("held" if e.held else "live"),
                    "n": e.count, "amount": e.amount or 0} for e in rows]
    except GraphUnavailable:  # what Postgres knows: the repair's own effects
        effects = [{"kind": r["kind"], "state": "held" if r["role"] == RepairEffect.Role.REPLACEMENT else "invalidated",
                    "n": r["n"], "amount": r["amount"] or 0}
                   for r in incident.effects.values("kind", "role").annotate(n=Count("pk"), amount=Sum("amount_cents"))]
    return {"groups": [{"agent": a, "status": s, "count": n} for (a, s), n in groups.items()],
            "agents": sorted(first_seq, key=first_seq.get), "edges": [
                {"from": f, "to": t, "kind": k, "count": n} for (f, t, k), n in edges.items()],
            "effects": sorted(effects, key=lambda e: (e["kind"], e["state"])), "source": incident.source_id}
