"""An incident's provenance as W3C PROV (the `prov` library): PROV-JSON and PROV-O in Turtle.

It joins the repair (repairs) and its compensation items and their decisions (compensation), so it
lives in the top layer. docs/prov.md is the mapping; in short:
- entities: the sources the incident's actions ingested (and the flagged one), every fact version they
  read or wrote, the effects they caused (and those the repair invalidated or cancelled), and the
  incident's compensation items;
- activities: each action of the incident (its ActionOutcome rows: the blast radius and the repair's
  new actions), the repair itself, and each decision a person took on an item;
- agents: the kintsugi agents that ran the actions and the people who flagged and decided;
- relations: used (a read, an ingest, the repair's flagged source, a decision's item), wasGeneratedBy
  (a write, an effect, an item), wasAssociatedWith (who ran each activity), wasInformedBy (a handoff; the
  repair re-running an action), wasInvalidatedBy (what the repair retired) and wasDerivedFrom (an item
  from the effects it compensates).
Identifiers are `ks:<kind>/<id>` in a namespace of the workspace; everything is read through the named
queries of provenance.graph.queries and the rows of Postgres, never from the agents' own text.
"""
from __future__ import annotations

from urllib.parse import quote

from prov.constants import PROV_ROLE, PROV_TYPE
from prov.model import Namespace, ProvDocument

from compensation.models import CompensationItem
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Source
from provenance.vocabulary import ActionStatus
from repairs.models import ActionOutcome, Incident, RepairEffect

FORMATS = ("json", "ttl")
CONTENT_TYPES = {"json": "application/json", "ttl": "text/turtle; charset=utf-8"}
KINTSUGI = Namespace("kintsugi", "https://kintsugi.invalid/ns#")
RE_RUN = (ActionStatus.RERUN_CHANGED, ActionStatus.RERUN_SAME, ActionStatus.NEW)  # outcomes the repair executed
DECIDED = (CompensationItem.Status.APPROVED, CompensationItem.Status.EXECUTED, CompensationItem.Status.REJECTED)


def _local(kind: str, value) -> str:
    # Source ids and usernames are free text: percent-encode everything an IRI may not hold raw.
    return f"{kind}/{quote(str(value), safe='-_.~/')}"


class _Builder:
    def __init__(self, incident: Incident):
        self.incident, self.doc = incident, ProvDocument()
        self.doc.add_namespace(KINTSUGI)
        self.ks = self.doc.add_namespace("ks", f"urn:kintsugi:workspace:{quote(incident.workspace.name)}/")
        self.made: set[str] = set()

    def id(self, kind: str, value):
        return self.ks[_local(kind, value)]

    def once(self, kind: str, value, make) -> object:
        """Each node is added once, whichever relation names it first."""
        key = _local(kind, value)
        if key not in self.made:
            self.made.add(key)
            make(self.ks[key])
        return self.ks[key]

    def person(self, user) -> object:
        return self.once("person", user.get_username(), lambda qn: self.doc.agent(qn, {
            PROV_TYPE: KINTSUGI["Person"], "kintsugi:username": user.get_username()}))

    def software_agent(self, name: str) -> object:
        return self.once("agent", name, lambda qn: self.doc.agent(qn, {
            PROV_TYPE: KINTSUGI["SoftwareAgent"], "kintsugi:name": name}))


def incident_document(incident: Incident) -> ProvDocument:
    """The PROV document of one incident (see the module docstring and docs/prov.md for the mapping)."""
    b = _Builder(incident)
    doc, ws = b.doc, incident.workspace
    graph = workspace_graph(ws.name)
    outcomes = list(ActionOutcome.objects.filter(incident=incident).order_by("seq"))
    ids = [o.action_id for o in outcomes]

    repair = doc.activity(b.id("repair", incident.pk), incident.started_at, incident.finished_at, {
        PROV_TYPE: KINTSUGI["Repair"], "kintsugi:status": incident.status, "kintsugi:reason": incident.reason,
        "kintsugi:run_number": incident.run_number})
    doc.wasAssociatedWith(repair, b.person(incident.flagged_by), other_attributes={PROV_ROLE: KINTSUGI["flagger"]})

    sources = {s.source_id: s for s in Source.objects.filter(workspace=ws)}

    def source(source_id: str):
        found = sources.get(source_id)
        return b.once("source", source_id, lambda qn: doc.entity(qn, {
            PROV_TYPE: KINTSUGI["Source"], "kintsugi:source_id": source_id,
            "kintsugi:title": found.title if found else "", "kintsugi:trust": found.trust if found else "unknown",
            "kintsugi:flagged": source_id == incident.source_id}))

    doc.used(repair, source(incident.source_id), other_attributes={PROV_ROLE: KINTSUGI["flagged_source"]})

    for o in outcomes:
        act = doc.activity(b.id("action", o.action_id), other_attributes={
            PROV_TYPE: KINTSUGI["Action"], "kintsugi:agent": o.agent, "kintsugi:ticket": o.ticket,
            "kintsugi:seq": o.seq, "kintsugi:outcome": str(o.status)})
        doc.wasAssociatedWith(act, b.software_agent(o.agent))
        if o.status in RE_RUN:
            doc.wasInformedBy(act, repair, other_attributes={PROV_TYPE: KINTSUGI["rerun"]})
    action = {o.action_id: b.id("action", o.action_id) for o in outcomes}

    for row in graph.ro_query(queries.ACTION_INGESTS, {"ids": ids}):
        doc.used(action[row.action], source(row.source), other_attributes={PROV_TYPE: KINTSUGI["ingest"]})
    for row in graph.ro_query(queries.ACTION_FACTS, {"ids": ids}):
        fact = b.once("fact", row.id, lambda qn, r=row: doc.entity(qn, {
            PROV_TYPE: KINTSUGI["FactVersion"], "kintsugi:key": r.key, "kintsugi:version": r.version,
            "kintsugi:value": r.value, "kintsugi:active": r.active, "kintsugi:writer": r.writer}))
        if row.edge == "READ":
            doc.used(action[row.action], fact, other_attributes={PROV_TYPE: KINTSUGI["read"]})
        else:
            doc.wasGeneratedBy(fact, action[row.action])
            if row.invalidated_by == incident.pk:
                doc.wasInvalidatedBy(fact, repair)
    for row in graph.ro_query(queries.PREDECESSORS, {"ids": ids}):
        if row.kind == "HANDED_OFF" and row.other in action:
            doc.wasInformedBy(action[row.action], action[row.other], other_attributes={PROV_TYPE: KINTSUGI["handoff"]})

    def effect(effect_id: int, kind: str, ticket, amount, currency, live=None, held=None):
        return b.once("effect", effect_id, lambda qn: doc.entity(qn, {
            PROV_TYPE: KINTSUGI["Effect"], "kintsugi:kind": kind, "kintsugi:ticket": ticket or "",
            "kintsugi:amount_cents": amount or 0, "kintsugi:currency": currency or "",
            **({"kintsugi:live": live} if live is not None else {}),
            **({"kintsugi:held": held} if held is not None else {})}))

    for row in graph.ro_query(queries.ACTION_EFFECTS, {"ids": ids}):
        doc.wasGeneratedBy(effect(row.id, row.kind, row.ticket, row.amount, row.currency, row.live, row.held),
                           action[row.action])
    for e in RepairEffect.objects.filter(incident=incident).order_by("effect_id", "role"):
        entity = effect(e.effect_id, e.kind, e.ticket, e.amount_cents, e.currency)
        if e.role in (RepairEffect.Role.INVALIDATED, RepairEffect.Role.CANCELLED):
            doc.wasInvalidatedBy(entity, repair, other_attributes={PROV_TYPE: KINTSUGI[e.role]})

    items = CompensationItem.objects.filter(incident=incident).select_related("decided_by").order_by("pk")
    for item in items.prefetch_related("effects"):
        entity = doc.entity(b.id("item", item.pk), {
            PROV_TYPE: KINTSUGI["CompensationItem"], "kintsugi:kind": item.kind, "kintsugi:status": item.status,
            "kintsugi:ticket": item.ticket_id, "kintsugi:amount_cents": item.amount_cents,
            "kintsugi:currency": item.currency})
        doc.wasGeneratedBy(entity, repair)
        for e in sorted({e.effect_id for e in item.effects.all()}):
            doc.wasDerivedFrom(entity, b.id("effect", e))
        if item.status in DECIDED and item.decided_by is not None:
            verdict = (CompensationItem.Status.REJECTED if item.status == CompensationItem.Status.REJECTED
                       else CompensationItem.Status.APPROVED)
            decision = doc.activity(b.id("decision", item.pk), item.decided_at, item.decided_at, {
                PROV_TYPE: KINTSUGI["Decision"], "kintsugi:decision": str(verdict),
                "kintsugi:reason": item.decision_reason})
            doc.used(decision, entity)
            doc.wasAssociatedWith(decision, b.person(item.decided_by), other_attributes={
                PROV_ROLE: KINTSUGI["reviewer"]})
    return doc


def render(incident: Incident, fmt: str) -> tuple[str, str, str]:
    """(body, content type, file name) of the incident's PROV document as PROV-JSON or PROV-O Turtle."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    doc = incident_document(incident)
    body = doc.serialize(format="json") if fmt == "json" else doc.serialize(format="rdf", rdf_format="turtle")
    return body, CONTENT_TYPES[fmt], f"incident-{incident.pk}-prov.{'json' if fmt == 'json' else 'ttl'}"
