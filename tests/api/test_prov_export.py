"""An incident's provenance as W3C PROV: PROV-JSON loads back with the `prov` library and holds as many
entities, activities, agents and relations as the incident has sources, fact versions, effects, items,
actions, decisions and edges (counted here straight from Postgres and the graph, not by the exporter's
queries); PROV-O parses with rdflib; the API, MCP and the admin page share the incident read rule."""
import json
from types import SimpleNamespace

import pytest
import rdflib
from prov.model import ProvActivity, ProvAgent, ProvDocument, ProvEntity, ProvRelation
from rest_framework.authtoken.models import Token

from compensation.drafting import kinds
from compensation.models import CompensationItem
from compensation.review.services import approve_item, reject_item
from core.errors import map_domain_error
from kintsugi_site import mcp_prov
from provenance.graph.graph import workspace_graph
from repairs.models import ActionOutcome, Incident, RepairEffect
from tests.api.test_api_access import assert_error
from tests.helpers import client_for, create_user

pytestmark = pytest.mark.django_db
PROV = rdflib.Namespace("http://www.w3.org/ns/prov#")


@pytest.fixture
def decided(repaired_desk):
    """The module's repaired canonical incident with one refund reversal approved and one rejected by the
    reviewer (the flagger may not: four-eyes); the decisions roll back after each test."""
    incident = Incident.objects.get(pk=repaired_desk.incident_id)
    reviewer = repaired_desk.people.reviewer
    refunds = list(CompensationItem.objects.filter(incident=incident, kind="refund_reversal").order_by("pk"))
    for person in vars(repaired_desk.people).values():
        Token.objects.get_or_create(user=person)
    approve_item(item=refunds[0], actor=reviewer, reason="checked the ledger", via="api")
    reject_item(item=refunds[1], actor=reviewer, reason="customer kept the goods", via="api")
    return SimpleNamespace(incident=incident, people=repaired_desk.people, ws=incident.workspace)


def expected_counts(incident: Incident) -> dict:
    """What the document must hold, from the incident's own rows and raw graph reads."""
    graph = workspace_graph(incident.workspace.name)
    outcomes = list(ActionOutcome.objects.filter(incident=incident))
    ids = [o.action_id for o in outcomes]
    ingests = graph.ro_query("MATCH (a:Action)-[:INGESTED]->(s:Source) WHERE a.id IN $ids RETURN a.id, s.id", {"ids": ids})
    touched = graph.ro_query("MATCH (a:Action)-[r:READ|WROTE]->(f:Fact) WHERE a.id IN $ids "
                             "RETURN a.id, type(r), f.id, f.invalidated_by", {"ids": ids})
    effects = {r[0] for r in graph.ro_query("MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE a.id IN $ids RETURN e.id",
                                            {"ids": ids})}
    handoffs = graph.ro_query("MATCH (p:Action)-[:HANDED_OFF]->(c:Action) WHERE p.id IN $ids AND c.id IN $ids "
                              "RETURN count(*)", {"ids": ids})[0][0]
    repair_effects = list(RepairEffect.objects.filter(incident=incident))
    items = list(CompensationItem.objects.filter(incident=incident).prefetch_related("effects"))
    decisions = [i for i in items if i.decided_by_id and i.status in ("approved", "executed", "rejected")]
    sources = {r[1] for r in ingests} | {incident.source_id}
    writes = [r for r in touched if r[1] == "WROTE"]
    reruns = [o for o in outcomes if o.status in ("rerun_changed", "rerun_same", "new")]
    people = {incident.flagged_by_id} | {i.decided_by_id for i in decisions}
    return {
        "entities": len(sources) + len({r[2] for r in touched}) + len(effects | {e.effect_id for e in repair_effects})
        + len(items),
        "activities": len(outcomes) + 1 + len(decisions),
        "agents": len({o.agent for o in outcomes}) + len(people),
        "relations": (len(ingests) + len(touched) + 1 + len(decisions)  # used
                      + len(effects) + len(items)  # wasGeneratedBy (writes are in `touched`)
                      + len(outcomes) + 1 + len(decisions)  # wasAssociatedWith
                      + handoffs + len(reruns)  # wasInformedBy
                      + sum(1 for r in writes if r[3] == incident.pk)
                      + sum(1 for e in repair_effects if e.role in ("invalidated", "cancelled"))  # wasInvalidatedBy
                      + sum(len({e.effect_id for e in i.effects.all()}) for i in items)),  # wasDerivedFrom
        "outcomes": len(outcomes), "items": len(items), "decisions": len(decisions)}


def counts(doc: ProvDocument) -> dict:
    records = doc.get_records()
    return {"entities": sum(isinstance(r, ProvEntity) for r in records),
            "activities": sum(isinstance(r, ProvActivity) for r in records),
            "agents": sum(isinstance(r, ProvAgent) for r in records),
            "relations": sum(isinstance(r, ProvRelation) for r in records)}


def test_prov_json_of_the_canonical_incident_loads_back_and_round_trips_its_counts(decided):
    lead = decided.people.lead
    response = client_for(lead).get(f"/api/v1/incidents/{decided.incident.pk}/prov/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="incident-{decided.incident.pk}-prov.json"'
    doc = ProvDocument.deserialize(content=response.content.decode(), format="json")
    want = expected_counts(decided.incident)
    # The article's incident: 25 actions in the radius and 4 new ones; its 10 compensation drafts and the
    # replacements its re-runs produced, held for approval, are items; two of them decided.
    assert (want["outcomes"], want["decisions"]) == (29, 2)
    item_kinds = CompensationItem.objects.filter(incident=decided.incident).values_list("kind", flat=True)
    assert sum(k in kinds.COMPENSATING for k in item_kinds) == 10 and want["items"] == len(item_kinds)
    assert counts(doc) == {k: want[k] for k in ("entities", "activities", "agents", "relations")}
    # Loaded back, it is the same document, and serialising it again loses nothing.
    again = ProvDocument.deserialize(content=doc.serialize(format="json"), format="json")
    assert again == doc
    rejected = [r for r in doc.get_records(ProvActivity) if r.identifier.localpart.startswith("decision/")
                and ("kintsugi:decision", "rejected") in {(str(k), v) for k, v in r.attributes}]
    assert len(rejected) == 1


def test_prov_o_turtle_parses_with_rdflib_and_types_every_node(decided):
    response = client_for(decided.people.auditor).get(f"/api/v1/incidents/{decided.incident.pk}/prov/?format=ttl")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/turtle")
    graph = rdflib.Graph().parse(data=response.content.decode(), format="turtle")
    want = expected_counts(decided.incident)
    typed = {kind: len(set(graph.subjects(rdflib.RDF.type, PROV[kind]))) for kind in ("Entity", "Activity", "Agent")}
    assert typed == {"Entity": want["entities"], "Activity": want["activities"], "Agent": want["agents"]}
    flagged = rdflib.URIRef(f"urn:kintsugi:workspace:{decided.ws.name}/source/partner-blog/policy-update")
    assert (flagged, rdflib.RDF.type, PROV.Entity) in graph


def test_mcp_gives_the_same_document(decided):
    answer = mcp_prov.incident_prov(user=decided.people.lead, incident=decided.incident.pk, format="json")
    doc = ProvDocument.deserialize(content=json.dumps(answer["prov"]), format="json")
    assert counts(doc) == {k: v for k, v in expected_counts(decided.incident).items()
                           if k in ("entities", "activities", "agents", "relations")}
    turtle = mcp_prov.incident_prov(user=decided.people.lead, incident=decided.incident.pk, format="ttl")["turtle"]
    assert len(rdflib.Graph().parse(data=turtle, format="turtle")) > 0


def _refused(fn) -> int:
    with pytest.raises(Exception) as caught:
        fn()
    return map_domain_error(caught.value)[0]


def test_another_workspace_is_a_404_and_a_role_without_incident_read_a_403_on_api_and_mcp(decided):
    pk = decided.incident.pk
    outsider = create_user("outsider", "Support lead")  # a lead of no workspace of this incident
    Token.objects.create(user=outsider)
    assert_error(client_for(outsider).get(f"/api/v1/incidents/{pk}/prov/"), 404, "not_found")
    assert _refused(lambda: mcp_prov.incident_prov(user=outsider, incident=pk, format="json")) == 404
    # A Workspace admin of this very workspace: a member, but their role does not read incidents.
    admin = create_user("ws-admin", "Workspace admin", workspaces=[decided.ws])
    Token.objects.create(user=admin)
    assert_error(client_for(admin).get(f"/api/v1/incidents/{pk}/prov/"), 403, "permission_denied")
    assert _refused(lambda: mcp_prov.incident_prov(user=admin, incident=pk, format="json")) == 403
    # An unknown format is a 400 on both, never a guess.
    assert_error(client_for(decided.people.lead).get(f"/api/v1/incidents/{pk}/prov/?format=xml"), 400, "invalid")
    assert _refused(lambda: mcp_prov.incident_prov(user=decided.people.lead, incident=pk, format="xml")) == 400


def test_the_incident_page_links_to_both_formats(decided, client):
    client.force_login(decided.people.lead)
    page = client.get(f"/admin/repairs/incident/{decided.incident.pk}/change/").content.decode()
    for fmt in ("json", "ttl"):
        url = f"/api/v1/incidents/{decided.incident.pk}/prov/?format={fmt}"
        assert f'href="{url}"' in page
        assert client.get(url).status_code == 200  # the admin's session is enough
