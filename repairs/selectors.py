"""Read side of repairs for the incident page and the reports (the dashboard's repairs part too,
kintsugi_site.dashboard): counts, outcomes, the
per-ticket before → after, effects, transitions and progress. The explain path is repairs.explain,
the blast-radius picture's data repairs.radius_picture.

Nothing here changes state. Pages call these with bounded sizes (limits, pages of tickets), so an
incident with thousands of actions costs the same handful of indexed queries as the canonical one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.db.models import CharField, IntegerField, JSONField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform

from core.money import format_money
from core.vocabulary import IncidentStatus
from provenance.vocabulary import CHANGED, COUNT_KEYS, DEAD, ActionStatus
from repairs.models import ActionOutcome, Incident, RepairEffect
from repairs.wording import STATUS_LABELS, describe, status_label  # noqa: F401 - the pages' words, here too

STATUSES = COUNT_KEYS  # the repair statuses, in the article's order
RUNNING = (IncidentStatus.OPEN, IncidentStatus.REPAIRING, IncidentStatus.BLOCKED, IncidentStatus.NEEDS_ATTENTION)


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
                      not_rerun_ids=KeyTransform("not_rerun", "plan"),  # repairs.not_rerun, from the same query
                      currency=RawSQL(_CURRENCY_SQL, [], output_field=CharField()),
                      tickets_in_radius=RawSQL(_TICKETS_SQL, [], output_field=IntegerField()),
                      # touched: some action of the ticket did more than stay skipped (as the repair counts it)
                      tickets_touched=RawSQL(_TICKETS_SQL + " AND status <> %s", [ActionStatus.SKIPPED.value], output_field=IntegerField()))
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
        steps = [o for o in self.steps if (o.status not in DEAD if after else o.status != ActionStatus.NEW)]
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


def ticket_page(incident: Incident, page: int, per_page: int):
    """The ticket ids of one page of the radius, plus one more (to know there is a next page), as a
    subquery: the page's actions then come in the same query."""
    return (ActionOutcome.objects.filter(incident=incident).exclude(ticket="").order_by("ticket")
            .values("ticket").distinct()[(page - 1) * per_page:page * per_page + 1])


def ticket_changes(*, incident: Incident, page: int = 1, per_page: int = 25) -> dict:
    """Per-ticket before → after decisions for one page of the radius' tickets, in one query. Actions
    without a ticket (research reading a page) come first on page 1."""
    page = max(1, page)
    wanted = Q(ticket__in=ticket_page(incident, page, per_page)) | (Q(ticket="") if page == 1 else Q(pk__in=[]))
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
