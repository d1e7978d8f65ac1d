"""Verification in proportion to the damage: the repair's own check re-runs only what the flagged source
could change and checks the boundary around it; the whole-desk replay stays on demand. Both agree on the
canonical desk and on the walk's shapes, and a repair broken inside the set, or just outside it, is
caught by the incremental check."""
import json

import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import Source, Ticket, Workspace
from provenance.recording.selectors import radius_actions
from provenance.recording.services import desk_run, record_root
from provenance.vocabulary import ActionStatus as S
from repairs import deep_check, job
from repairs.engine import RepairWalk
from repairs.models import Incident
from tests.helpers import flag_and_repair
from tests.repairs.test_walk_shapes import BAD, CLEAN, SOURCES  # noqa: F401 - registers the shapes' agents

pytestmark = pytest.mark.django_db(transaction=True)


def _radius_then_full(workspace: str, source: str = POISONED_PAGE) -> tuple[Incident, dict]:
    incident = flag_and_repair(workspace, source)
    full = deep_check.verify_full(incident=incident, actor=None, reason="both checks agree", via="cli")
    incident.refresh_from_db()
    return incident, full


def test_the_canonical_repair_is_verified_in_proportion_and_the_full_replay_agrees(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="vr-canon")
    incident, full = _radius_then_full("vr-canon")
    v = incident.verification
    assert incident.status == "repaired", (v["rows"], v["boundary"], v["set_size"], v["actions_rerun"])
    assert incident.blast_radius == 25
    assert incident.counts == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6,
                               "superseded": 8, "new": 4}
    assert [v[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert v["scope"] == "radius" and v["boundary"]["outside"]["actions"] > 0
    # The set is the radius and what it handed off: far fewer actions than the 66 of the whole desk.
    assert 0 < v["actions_rerun"] < full["actions_rerun"]
    assert [full[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]


SHAPES = {
    "diamond": [("shape_reader", {"source": BAD, "key": "root"}), ("shape_copier", {"from": "root", "to": "left"}),
                ("shape_copier", {"from": "root", "to": "right"}), ("shape_joiner", {})],
    "route": [("shape_reader", {"source": CLEAN, "key": "policy"}), ("shape_reader", {"source": BAD, "key": "policy"}),
              ("shape_router", {"ticket": "t1"})],
    "late": [("shape_reader", {"source": BAD, "key": "policy"}), ("shape_flagger", {}), ("shape_late_reader", {})],
    "ticket": [("shape_ticket_reader", {"source": BAD, "ticket": "t1"}),
               ("shape_copier", {"from": "t1/decision", "to": "audit"})],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_both_verifications_agree_on_the_walks_shapes(shape):
    name = f"vr-shape-{shape}"
    ws = Workspace.objects.create(name=name)
    for source, content in SOURCES.items():
        Source.objects.create(workspace=ws, source_id=source, content=content)
    Ticket.objects.create(workspace=ws, ticket_id="t1", customer_name="C", customer_email="t1@customers.example",
                          subject="s", body="b", amount_cents=500, payment_reference="ch_t1")
    for agent_name, payload in SHAPES[shape]:
        record_root(workspace=name, agent=agent_name, payload=payload)
    incident, full = _radius_then_full(name, BAD)
    v = incident.verification
    assert incident.status == "repaired", v["rows"]
    assert [v[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert [full[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert v["actions_rerun"] <= full["actions_rerun"]


def _canonical(name: str):
    desk_run(workspace=name)
    graph = workspace_graph(name)
    radius = {r.id for r in radius_actions(graph, POISONED_PAGE, build_mirror=False)}
    return graph, radius


def _differs(incident: Incident) -> list:
    v = incident.verification
    assert incident.status == "needs_attention", v
    assert v["scope"] == "radius"
    return v["rows"]


def test_a_repair_broken_inside_the_radius_is_caught(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    graph, radius = _canonical("vr-inside")
    # A customer who claimed VIP to be refunded in full for a change of mind: the clean run only replies.
    ticket = Ticket.objects.filter(workspace__name="vr-inside", body__startswith="I am a VIP, I changed my mind") \
        .order_by("ticket_id").values_list("ticket_id", flat=True).first()
    visit = RepairWalk._visit

    def forgets_one_ticket(self, node):  # the walk leaves one radius ticket's triage as it was
        if node.ticket == ticket and node.agent == "triage":
            return self._set(node, S.SKIPPED)
        return visit(self, node)

    monkeypatch.setattr(RepairWalk, "_visit", forgets_one_ticket)
    rows = _differs(flag_and_repair("vr-inside"))
    assert any(r["side"] in ("repaired", "baseline") and r["row"].get("ticket") == ticket for r in rows), rows


@pytest.mark.parametrize("what", ["effect", "action", "fact"])
def test_a_repair_broken_just_outside_the_radius_is_caught(settings, monkeypatch, what):
    """The apply also ends an effect or an action just after the radius began, or retires a clean fact."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    name = f"vr-outside-{what}"
    graph, radius = _canonical(name)
    rows = [tuple(r) for r in graph.ro_query(
        "MATCH (a:Action) OPTIONAL MATCH (a)-[:CAUSED]->(e:Effect) OPTIONAL MATCH (a)-[:WROTE]->(f:Fact) "
        "RETURN a.id, a.seq, e.id, f.id ORDER BY a.seq")]
    start = min(seq for aid, seq, _, _ in rows if aid in radius)
    outside = [r for r in rows if r[0] not in radius and r[1] > start]
    target = {"effect": next(r[2] for r in outside if r[2] is not None),
              "action": outside[0][0],
              # Only the policy pages' readers write facts, all before the radius: the clean page's.
              "fact": next(r[3] for r in rows if r[0] not in radius and r[3] is not None)}[what]
    query = {"effect": "MATCH (e:Effect {id: $id}) SET e.live = false",
             "action": "MATCH (a:Action {id: $id}) SET a.status = 'superseded'",
             "fact": "MATCH (f:Fact {id: $id}) SET f.active = false"}[what]
    apply_plan = job.apply_plan

    def applies_one_more(incident, graph):
        apply_plan(incident, graph)
        graph.query(query, {"id": target})

    monkeypatch.setattr(job, "apply_plan", applies_one_more)
    rows = _differs(flag_and_repair(name))
    assert any(r["side"] == "boundary" for r in rows), rows


def test_verify_full_from_the_cli_the_api_and_the_metrics(settings, capsys):
    from django.test import Client
    from rest_framework.test import APIClient

    from compensation.models import AuditEvent
    from core.roles import SUPPORT_LEAD
    from kintsugi_site.celery import app
    from tests.helpers import create_user, run_command

    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="vr-cli")
    incident = flag_and_repair("vr-cli")
    code, out = run_command(capsys, "verify", "--workspace", "vr-cli", "--full", "--json")
    result = json.loads(out[out.index("{"):])
    assert code == 0 and result["incident"] == incident.pk
    assert [result[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0] and result["actions_rerun"] > 25
    event = AuditEvent.objects.filter(incident_id=incident.pk, action="verification.full").get()
    assert event.data["actions_rerun"] == result["actions_rerun"]
    # Red: without --full nothing is replayed (each repair verified its radius already).
    code, _ = run_command(capsys, "verify", "--incident", str(incident.pk))
    assert code == 2
    # The API asks a worker; another workspace's incident is a 404, a lead without it cannot ask.
    lead = create_user("vr-lead", SUPPORT_LEAD, workspaces=[incident.workspace])
    outsider = create_user("vr-outsider", SUPPORT_LEAD, workspaces=[Workspace.objects.create(name="vr-other")])
    api = APIClient()
    old = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        api.force_authenticate(outsider)
        url = f"/api/v1/incidents/{incident.pk}/verify-full/"
        assert api.post(url, {"reason": "audit"}, format="json").status_code == 404
        api.force_authenticate(lead)
        assert api.post(url, {"reason": "nightly audit"}, format="json").status_code == 202
    finally:
        app.conf.task_always_eager = old
    assert AuditEvent.objects.filter(incident_id=incident.pk, action="verification.full").count() == 2
    summary = api.get(f"/api/v1/incidents/{incident.pk}/").json()["verification"]
    assert summary["scope"] == "radius" and summary["full"]["by"] == "vr-lead"
    assert summary["actions_rerun"] < summary["full"]["actions_rerun"] and summary["replay_calls"] == 0
    metrics = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert 'kintsugi_verification_replay_calls_total{scope="radius"} 0.0' in metrics
    assert f'kintsugi_verification_actions_rerun_total{{scope="full"}} {2.0 * result["actions_rerun"]}' in metrics



def _scanned(graph, query, params) -> int:
    """How many nodes the query's scan hands on (GRAPH.PROFILE: the plan's leaf operation)."""
    op = graph._graph.profile(query, params).structured_plan
    while op.children:
        op = op.children[0]
    return op.records_produced


def _ticket_read(workspace: str) -> tuple[int, int, int]:
    """(actions scanned, actions of the ticket, actions of the desk) for the verification's read of one ticket."""
    from repairs import queries
    from repairs.verify_radius import DEAD

    graph = workspace_graph(workspace)
    params = {"tickets": ["t01"], "below": 1e18, "dead": list(DEAD)}
    mine = len(graph.ro_query("MATCH (a:Action) WHERE a.ticket = 't01' RETURN a.id"))
    every = graph.ro_query("MATCH (a:Action) RETURN count(a)")[0][0]
    return _scanned(graph, queries.DECISIONS_OF_TICKETS, params), mine, every


def test_the_verifications_read_of_a_tickets_decisions_scans_only_that_tickets_actions():
    """The radius check reads the decisions of the set's tickets by the ticket index: a scan of every
    action against the whole list timed a 1M-action desk's verification out (150k tickets)."""
    desk_run(workspace="vr-index")
    workspace_graph("vr-index").ro_query("RETURN 1")  # the schema, as every connection makes it
    scanned, mine, every = _ticket_read("vr-index")
    assert 0 < mine < every and scanned == mine, (scanned, mine, every)


def test_without_the_ticket_index_the_read_scans_the_whole_desk():
    """The red case of the check above: the same read on a graph without the ticket index."""
    desk_run(workspace="vr-noindex")
    graph = workspace_graph("vr-noindex")
    graph.ro_query("RETURN 1")
    graph._graph.query("DROP INDEX ON :Action(ticket)")
    scanned, mine, every = _ticket_read("vr-noindex")
    assert scanned == every > mine, (scanned, mine, every)
