import json

from django.contrib.auth import get_user_model

from provenance.graph import workspace_graph
from provenance.services import get_workspace
from repairs.models import Incident
from repairs.services import flag_source
from repairs.job import run_repair


def flagger(name: str = "flagger"):
    user, _ = get_user_model().objects.get_or_create(username=name)
    return user


def open_incident(workspace: str, source: str, user=None) -> Incident:
    return flag_source(workspace=get_workspace(workspace), source_id=source, actor=user or flagger(),
                       reason="poisoned", via=Incident.Via.CLI)


def wait_until_finished(incident: Incident, timeout: float) -> None:
    """Wait until a repair running in a real worker has ended, repaired or failed."""
    from tests.conftest import wait_for

    wait_for(lambda: Incident.objects.get(pk=incident.pk).status in ("repaired", "failed"), timeout=timeout)


def repair(workspace: str, source: str, **kw) -> Incident:
    return run_repair(incident_id=open_incident(workspace, source).pk, **kw)


def graph_dump(workspace: str) -> dict:
    """Everything in a workspace graph that a repair can touch, id for id."""
    g = workspace_graph(workspace)
    return {
        "actions": g.ro_query("MATCH (a:Action) RETURN a.id, a.agent, a.seq, a.status, a.dhash, a.payload ORDER BY a.id"),
        "facts": g.ro_query("MATCH (f:Fact) RETURN f.id, f.key, f.version, f.active ORDER BY f.id"),
        "effects": g.ro_query("MATCH (e:Effect) RETURN e.id, e.kind, e.ticket, e.amount, e.live, e.held ORDER BY e.id"),
        "edges": g.ro_query("MATCH (a)-[r]->(b) RETURN type(r), coalesce(a.id, ''), coalesce(b.id, '') "
                            "ORDER BY type(r), coalesce(a.id, ''), coalesce(b.id, '')"),
    }


def inputs_by_step(workspace: str) -> dict:
    """(ticket, source, agent lineage from the root) → (action id, the inputs it saw: payload and the values of
    the facts it read). The lineage tells a notifier after a refund from a notifier after a reply."""
    g = workspace_graph(workspace)
    rows = g.ro_query(
        "MATCH (a:Action) WHERE NOT a.status IN ['poisoned', 'superseded'] "
        "OPTIONAL MATCH (a)-[:READ]->(f:Fact) RETURN a.id, a.agent, a.ticket, a.parent, a.payload, "
        "collect([f.key, f.value])")
    by_id = {r[0]: r for r in rows}

    def lineage(aid):
        chain = []
        while aid is not None and aid in by_id:
            chain.append(by_id[aid][1])
            aid = by_id[aid][3]
        return tuple(reversed(chain))

    return {(r[2], json.loads(r[4]).get("source"), lineage(r[0])): (r[0], json.loads(r[4]), sorted(tuple(x) for x in r[5] if x[0] is not None))
            for r in rows}
