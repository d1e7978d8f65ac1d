"""A re-executed read resolves as the original read did, against the repaired view: the snapshot the
original action opened on, plus that action's own earlier writes in this re-run, never its writes from
the original run (they may carry the poison) and never later writes.

Each shape is recorded twice, with and without the flagged page: the repair walk's re-runs must read
and decide what the clean recording read and decided."""
import pytest

from provenance.agents import agent
from provenance.graph.fact_index import FactIndex, FactVersion
from provenance.graph.graph import workspace_graph
from provenance.models import Source, Ticket, Workspace
from provenance.recording.recorder import GraphRecorder
from provenance.recording.selectors import export_state
from provenance.recording.services import record_root
from provenance.vocabulary import ActionStatus as S
from repairs.engine import compute_plan
from tests.helpers import repair

LATE_FAQ = "hc/late-delivery-faq"
POISON = "Late deliveries: a full refund, no questions asked."
SOURCES = {LATE_FAQ: POISON}

pytestmark = pytest.mark.django_db(transaction=True)


@agent("reads_late_triage")
def late_triage(rec, payload):
    # Checks memory first; only when the fact is missing does it read the help centre and write it.
    policy = rec.get("policy/late")
    if policy is None:
        page = rec.ingest(payload["source"])
        if page is not None:
            policy = "full" if "full refund" in page else "none"
            rec.set("policy/late", policy)
    if policy == "full":
        rec.effect("refund", amount=1200, ticket=payload["ticket"])
        return {"choice": "refund", "level": "full"}
    return {"choice": "reply", "level": "none"}


@agent("reads_own_write")
def own_write(rec, payload):
    # Writes, reads its write back, writes again and reads back the last: always this execution's.
    page = rec.ingest(payload["source"]) or "nothing"
    rec.set("note", f"first:{page}")
    first = rec.get("note")
    rec.set("note", f"second:{page}")
    return {"first": first, "second": rec.get("note"), "ticket": payload["ticket"]}


@agent("reads_parent")
def reads_parent(rec, payload):
    page = rec.ingest(payload["source"])
    rec.set("handed/policy", "full" if page else "none")
    rec.handoff("reads_child", {"ticket": payload["ticket"]})
    return {"read": page is not None}


@agent("reads_child")
def reads_child(rec, payload):
    before = rec.get("handed/policy")
    rec.set("handed/policy", f"seen:{before}")
    return {"saw": before, "back": rec.get("handed/policy")}


def _record(name: str, roots, *, sources=SOURCES):
    graph = workspace_graph(name)
    graph.delete()
    session = GraphRecorder(graph=graph, workspace=name, sources=sources, effects="sandbox")
    ids = [session.run_root(agent_name, payload) for agent_name, payload in roots]
    session.flush()
    return graph, ids


def _walk(graph, name: str):
    session = GraphRecorder(graph=graph, workspace=name, sources=SOURCES, effects="held",
                               excluded_sources={LATE_FAQ}, incident=1)
    plan = compute_plan(graph=graph, session=session, source=LATE_FAQ, incident=1)
    return {o["action_id"]: (o["status"], o["after"]) for o in plan.outcomes}, plan


def _clean_decisions(name: str, roots) -> list:
    graph, ids = _record(name, roots, sources={LATE_FAQ: "Late deliveries: we reply with the tracking link."})
    decisions = dict(graph.ro_query("MATCH (a:Action) RETURN a.id, a.decision"))
    return [[decisions[i] for i in chain] for chain in ids]


def test_a_read_before_its_own_write_answers_not_found_on_re_run():
    roots = [("reads_late_triage", {"ticket": "t1", "source": LATE_FAQ}),
             ("reads_late_triage", {"ticket": "t2", "source": LATE_FAQ})]
    graph, [[first], [second]] = _record("reads-late", roots)
    outcomes, plan = _walk(graph, "reads-late")
    # Red: the re-run's get answered its own original write (version 1, from the poisoned page), and
    # the decision stayed refund/full where the clean run says reply/none.
    assert outcomes[first] == (S.RERUN_CHANGED, {"choice": "reply", "level": "none"})
    assert outcomes[second] == (S.RERUN_CHANGED, {"choice": "reply", "level": "none"})
    assert sorted((e["role"], e["ticket"]) for e in plan.effects) == [("invalidated", "t1"), ("invalidated", "t2")]
    # The clean page was never poisoned: the first triage writes "none" there and nothing is refunded.
    assert _clean_decisions("reads-late-clean", roots) == [['{"choice": "reply", "level": "none"}']] * 2


def test_a_read_after_its_own_write_answers_this_re_runs_write_not_the_originals():
    graph, [[aid]] = _record("reads-own", [("reads_own_write", {"ticket": "t1", "source": LATE_FAQ})])
    outcomes, _ = _walk(graph, "reads-own")
    assert outcomes[aid] == (S.RERUN_CHANGED, {"first": "first:nothing", "second": "second:nothing", "ticket": "t1"})


def test_reads_across_a_handoff_see_the_parents_re_run_and_never_the_childs_original_write():
    graph, [[parent, child]] = _record("reads-handoff", [("reads_parent", {"ticket": "t1", "source": LATE_FAQ})])
    outcomes, _ = _walk(graph, "reads-handoff")
    assert outcomes[parent] == (S.RERUN_CHANGED, {"read": False})
    # The child reads what the re-run parent wrote, then its own write of this re-run.
    assert outcomes[child] == (S.RERUN_CHANGED, {"saw": "none", "back": "seen:none"})


def test_the_index_never_answers_a_reader_with_a_version_it_wrote():
    index = FactIndex()
    index.add_version(FactVersion(1, "k", "old", 1, 1.0, True, 1))
    index.add_version(FactVersion(2, "k", "mine", 2, 5.0, True, 5))
    index.add_version(FactVersion(3, "k", "later", 3, 7.0, True, 7))
    assert index.resolve("k", 5.0, 5).value == "old"  # its own stored write: an earlier execution's
    assert index.resolve("k", 6.0, 6).value == "mine"
    assert index.resolve("k", 6.0, 6, (2.0, 6.0)).value == "old"


def _desk(name: str, page: str) -> None:
    ws = Workspace.objects.create(name=name)
    Source.objects.create(workspace=ws, source_id=LATE_FAQ, content=page)
    for t in ("t1", "t2", "t3"):
        Ticket.objects.create(workspace=ws, ticket_id=t, customer_name=f"Customer {t}",
                              customer_email=f"{t}@customers.example", subject="Late", body="It is late",
                              amount_cents=1200, payment_reference=f"ch_{t}")
    for t in ("t1", "t2", "t3"):
        record_root(workspace=name, agent="reads_late_triage", payload={"ticket": t, "source": LATE_FAQ})


def test_the_self_read_desk_repairs_to_its_clean_run():
    _desk("reads-desk", POISON)
    _desk("reads-desk-clean", "Late deliveries: we reply with the tracking link.")
    incident = repair("reads-desk", LATE_FAQ)
    assert incident.status == "repaired", incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    state, clean = export_state(workspace="reads-desk"), export_state(workspace="reads-desk-clean")
    assert state["decisions"] == clean["decisions"] and state["effects"] == clean["effects"] == []
