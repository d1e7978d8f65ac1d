"""Read side of repairs for the admin, the reports and the CLI: the dashboard, the incident page, the
per-ticket before → after, the explain path of a repaired action and the blast-radius picture's data.

Nothing here changes state. Pages call these with bounded sizes (limits, pages of tickets), so an
incident with thousands of actions costs the same handful of indexed queries as the canonical one.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import CharField, Count, IntegerField, JSONField, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform

from provenance import paths, queries
from provenance.graph import GraphUnavailable, workspace_graph
from provenance.models import Workspace
from kintsugi_site.money import format_money
from provenance.selectors import DEAD, whole_seq, workspace_currency  # DEAD: statuses a repair undid
from repairs.engine import CHANGED, COUNT_KEYS
from repairs.models import ActionOutcome, Incident, RepairEffect
from repairs.wording import STATUS_LABELS, describe, status_label  # noqa: F401 - the pages' words, here too

S = Incident.Status
STATUSES = COUNT_KEYS  # the repair statuses, in the article's order
RUNNING = (S.OPEN, S.REPAIRING, S.BLOCKED)


# --- the dashboard ----------------------------------------------------------------------------------------
def dashboard(*, user, limit: int = 10) -> dict:
    """What a lead sees first, over the workspaces `user` may see: open incidents, the review queue's size
    and amount, recent flags and the workspaces. Bounded queries on indexed columns only; no count over a
    whole table."""
    # compensation depends on repairs (its items point at incidents), so its modules are imported lazily.
    from compensation.selectors import compensation_summary, item_counts_by_incident
    from provenance import tenancy

    light = (tenancy.scoped(Incident.objects.all(), user=user).select_related("workspace", "flagged_by")
             .defer("plan", "verification", "counts"))
    open_incidents = list(light.exclude(status=S.CLOSED).order_by("-created_at")[:limit])
    counts = item_counts_by_incident(incident_ids=[i.pk for i in open_incidents])
    for incident in open_incidents:
        incident.item_counts, incident.status_label = counts[incident.pk], status_label(incident)
    return {
        "open_incidents": open_incidents,
        "recent_flags": [setattr(i, "status_label", status_label(i)) or i for i in light.order_by("-created_at")[:limit]],
        "workspaces": list(tenancy.visible_workspaces(user=user).order_by("name")[:limit]),
        "review_queue": compensation_summary(incident=None, user=user),
        "limit": limit,
    }


# --- the incident page ------------------------------------------------------------------------------------
def _invalidated_by_kind():
    # {"refund": 5, "email": 5}: one grouped subquery in the incident's own SELECT, not a query per kind.
    return RawSQL(
        "SELECT jsonb_object_agg(s.kind, s.n) FROM (SELECT kind, count(*) AS n FROM repairs_repaireffect "
        "WHERE incident_id = repairs_incident.id AND role = %s GROUP BY kind) s", ["invalidated"],
        output_field=JSONField())


# The one currency of the workspace's tickets (the desk's decisions carry cents in it), NULL when several.
_CURRENCY_SQL = ("SELECT CASE WHEN count(DISTINCT currency) = 1 THEN min(currency) END FROM provenance_ticket "
                 "WHERE workspace_id = repairs_incident.workspace_id")
_TICKETS_SQL = ("SELECT count(DISTINCT ticket) FROM repairs_actionoutcome "
                "WHERE incident_id = repairs_incident.id AND ticket <> ''")


def incident_for_page(pk: int, *, within: QuerySet[Incident] | None = None) -> Incident:
    """The incident with what its page shows in one query (the plan, the big column, stays behind);
    `within` is the set it must belong to (the incidents the person may see)."""
    return ((within if within is not None else Incident.objects.all())
            .select_related("workspace", "flagged_by").defer("plan")
            .annotate(invalidated_by_kind=_invalidated_by_kind(),
                      currency=RawSQL(_CURRENCY_SQL, [], output_field=CharField()),
                      tickets_in_radius=RawSQL(_TICKETS_SQL, [], output_field=IntegerField()),
                      # touched: some action of the ticket did more than stay skipped (as the repair counts it)
                      tickets_touched=RawSQL(_TICKETS_SQL + " AND status <> %s", ["skipped"], output_field=IntegerField()))
            .get(pk=pk))


def _plural(kind: str, n: int) -> str:
    return f"{n} {kind}" + ("" if n == 1 else "s")


def outcome_rows(incident: Incident) -> list[dict]:
    """The outcome table in the article's form: (key, label, value) rows; empty until the walk is done."""
    if incident.blast_radius is None:
        return []
    counts = incident.counts or {}
    rows = [{"key": "blast_radius", "label": "Blast radius", "value": incident.blast_radius}]
    rows += [{"key": s, "label": STATUS_LABELS[s], "value": counts.get(s, 0)} for s in STATUSES]
    by_kind = getattr(incident, "invalidated_by_kind", None) or {}
    # Most first, money before messages: "5 refunds, 5 emails" as the article writes it.
    kinds = sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0] != "refund", kv[0]))
    detail = ", ".join(_plural(k, n) for k, n in kinds)
    rows.append({"key": "effects_invalidated", "label": "Effects that can't be undone",
                 "value": incident.effects_invalidated or 0, "detail": detail})
    if incident.tickets_untouched is not None:
        touched = getattr(incident, "tickets_touched", None) or 0
        rows.append({"key": "tickets_untouched", "label": "Tickets never touched",
                     "value": incident.tickets_untouched, "detail": f"of {incident.tickets_untouched + touched}"})
    if incident.compensations is not None:
        rows.append({"key": "compensations", "label": "Compensation items drafted", "value": incident.compensations})
    return rows


def verification_view(verification: dict | None, *, limit: int = 50) -> dict | None:
    """The three diff counts against the clean baseline and (up to `limit` of) the differing rows."""
    if verification is None:
        return None
    v, rows = verification, verification.get("rows", [])
    return {"facts": v.get("facts"), "decisions": v.get("decisions"), "effects": v.get("effects"),
            "clean": not (v.get("facts") or v.get("decisions") or v.get("effects")),
            "rows": [{"table": r["table"], "side": r["side"], "row": json.dumps(r["row"], sort_keys=True)}
                     for r in rows[:limit]],
            "more": max(0, len(rows) - limit)}


@dataclass
class TicketChange:
    """One ticket's actions in the radius, in seq order: its decisions before and after the repair."""

    ticket: str
    steps: list[ActionOutcome] = field(default_factory=list)
    currency: str | None = None  # of the decisions' amounts (repairs.wording.describe)

    def chain(self, *, after: bool, raw: bool = False) -> list[dict]:
        steps = [o for o in self.steps if (o.status not in DEAD if after else o.status != "new")]
        return [{"agent": o.agent, "action": o.action_id,
                 "decision": (o.after if after else o.before) if raw
                 else describe(o.after if after else o.before, currency=self.currency)}
                for o in steps]

    @property
    def before(self) -> list[dict]:
        return self.chain(after=False)

    @property
    def after(self) -> list[dict]:
        return self.chain(after=True)

    @property
    def changed(self) -> bool:
        return any(o.status in CHANGED for o in self.steps)

    @property
    def statuses(self) -> list[str]:
        return [o.status for o in self.steps]


def by_ticket(outcomes, *, currency: str | None = None) -> list[TicketChange]:
    """Group outcomes (ordered by ticket, then seq) into one TicketChange per ticket."""
    grouped: dict[str, TicketChange] = {}
    for o in outcomes:
        grouped.setdefault(o.ticket, TicketChange(o.ticket, currency=currency)).steps.append(o)
    return list(grouped.values())


def _ticket_page(incident: Incident, page: int, per_page: int):
    """The ticket ids of one page of the radius, plus one more (to know there is a next page), as a
    subquery: the page's actions then come in the same query."""
    return (ActionOutcome.objects.filter(incident=incident).exclude(ticket="").order_by("ticket")
            .values("ticket").distinct()[(page - 1) * per_page:page * per_page + 1])


def ticket_changes(*, incident: Incident, page: int = 1, per_page: int = 25) -> dict:
    """Per-ticket before → after decisions for one page of the radius' tickets, in one query. Actions
    without a ticket (research reading a page) come first on page 1."""
    page = max(1, page)
    wanted = Q(ticket__in=_ticket_page(incident, page, per_page)) | (Q(ticket="") if page == 1 else Q(pk__in=[]))
    rows = by_ticket(ActionOutcome.objects.filter(incident=incident).filter(wanted).order_by("ticket", "seq"),
                     currency=getattr(incident, "currency", None))
    with_ticket = [r for r in rows if r.ticket]
    has_next = len(with_ticket) > per_page
    if has_next:
        rows.remove(with_ticket[-1])
    return {"rows": rows, "page": page, "has_next": has_next, "has_previous": page > 1, "per_page": per_page}


def effect_dict(e: RepairEffect) -> dict:
    return {"effect_id": e.effect_id, "action_id": e.action_id, "role": e.role, "kind": e.kind, "ticket": e.ticket,
            "amount_cents": e.amount_cents, "currency": e.currency, "amount": format_money(e.amount_cents, e.currency),
            "details": e.details}


def effect_rows(*, incident: Incident, role: str = RepairEffect.Role.INVALIDATED, limit: int | None = 100) -> list[dict]:
    rows = incident.effects.filter(role=role).order_by("ticket", "kind", "effect_id")
    return [effect_dict(e) for e in (rows if limit is None else rows[:limit])]


def transition_rows(*, incident: Incident) -> list[dict]:
    """Who moved the incident from which status to which, when, why and from where."""
    return [{"at": t.at, "from": t.from_status, "to": t.to_status, "actor": t.actor.get_username() if t.actor else None,
             "via": t.via, "reason": t.reason} for t in incident.transitions.select_related("actor")]


def progress(incident: Incident) -> dict:
    """The JSON the incident page polls while the repair runs."""
    return {"incident": incident.pk, "status": incident.status, "label": status_label(incident), "phase": incident.phase,
            "done": incident.progress_done, "total": incident.progress_total, "percent": incident.percent,
            "running": incident.status in RUNNING, "error": incident.error or None}


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
        aid, kind, ticket, amount, currency, live, held = found[0]
        state = "invalidated" if not live else ("held" if held else "live")
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
    return {(k, v): {"value": json.loads(value) if value else None, "active": active}
            for k, v, value, active in rows}


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
    starts = {aid for aid, o in outcomes.items() if o.status == "poisoned"}
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
        # The step shape of provenance.selectors.explain_path (the API's, on the live graph), plus what
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
    from provenance.selectors import explain_path

    return explain_path(workspace=workspace.name, source=source, action_id=action_id)


# --- the blast-radius picture's data ----------------------------------------------------------------------
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
        return [{"id": eid, "action": aid, "kind": kind, "ticket": ticket or "", "amount": amount, "currency": cur,
                 "state": "invalidated" if not live else ("held" if held else "live")}
                for aid, eid, kind, ticket, amount, cur, _det, live, held in rows]
    # FalkorDB unreachable: what Postgres knows (the repair's own effects) is still worth a picture.
    return [{"id": e.effect_id, "action": e.action_id, "kind": e.kind, "ticket": e.ticket, "amount": e.amount_cents,
             "currency": e.currency, "state": {"invalidated": "invalidated", "replacement": "held"}.get(e.role, "invalidated")}
            for e in incident.effects.filter(action_id__in=ids)]


def graph_page(*, incident: Incident, page: int = 1, per_page: int = 12) -> dict:
    """Nodes, edges and effects for one page of the picture: the actions of `per_page` tickets of the
    radius (plus the ticketless ones, such as the research step that read the source, on every page)."""
    page = max(1, page)
    rows = list(ActionOutcome.objects.filter(incident=incident)
                .filter(Q(ticket__in=_ticket_page(incident, page, per_page)) | Q(ticket=""))
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
        effects = [{"kind": kind, "state": "invalidated" if not live else ("held" if held else "live"), "n": n,
                    "amount": amount or 0} for kind, live, held, n, amount in rows]
    except GraphUnavailable:  # what Postgres knows: the repair's own effects
        effects = [{"kind": r["kind"], "state": "held" if r["role"] == RepairEffect.Role.REPLACEMENT else "invalidated",
                    "n": r["n"], "amount": r["amount"] or 0}
                   for r in incident.effects.values("kind", "role").annotate(n=Count("pk"), amount=Sum("amount_cents"))]
    return {"groups": [{"agent": a, "status": s, "count": n} for (a, s), n in groups.items()],
            "agents": sorted(first_seq, key=first_seq.get), "edges": [
                {"from": f, "to": t, "kind": k, "count": n} for (f, t, k), n in edges.items()],
            "effects": sorted(effects, key=lambda e: (e["kind"], e["state"])), "source": incident.source_id}
