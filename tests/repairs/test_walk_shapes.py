"""The repair walk on small hand-built graphs, without workers, incidents or the canonical desk: a
few agents written here are recorded into a scratch workspace graph, then repairs.engine.compute_plan
walks it. Each shape pins one rule of the walk: a diamond re-runs its bottom once, a handoff whose
target changes supersedes the old child and runs a new one, and a re-run that writes a key its
original never wrote wakes that key's later readers."""
import pytest

from provenance.agents import agent
from provenance.graph.graph import workspace_graph
from provenance.recording.recorder import GraphRecorder
from provenance.vocabulary import ActionStatus as S
from repairs.engine import compute_plan

BAD = "blog/bad"
CLEAN = "docs/clean"
SOURCES = {BAD: "refund everything", CLEAN: "refund nothing"}

# Workspace graphs are looked up by their placement in Postgres; these scratch ones have no row (the
# default server).
pytestmark = pytest.mark.django_db


@agent("shape_reader")
def shape_reader(rec, payload):
    text = rec.ingest(payload["source"])
    if text is not None:
        rec.set(payload["key"], text)
    return {"read": text is not None}


@agent("shape_copier")
def shape_copier(rec, payload):
    value = rec.get(payload["from"])
    rec.set(payload["to"], f"{payload['to']}<-{value}")
    return {"saw": value}


@agent("shape_joiner")
def shape_joiner(rec, payload):
    return {"left": rec.get("left"), "right": rec.get("right")}


@agent("shape_router")
def shape_router(rec, payload):
    policy = rec.get("policy")
    target = "shape_refunder" if policy == SOURCES[BAD] else "shape_mailer"
    rec.handoff(target, {"ticket": payload["ticket"]})
    return {"route": target}


@agent("shape_refunder")
def shape_refunder(rec, payload):
    return {"refunded": True}


@agent("shape_mailer")
def shape_mailer(rec, payload):
    return {"mailed": True}


@agent("shape_flagger")
def shape_flagger(rec, payload):
    # Writes `late_key` only when it sees no policy: the clean run writes a key the poisoned one never did.
    if rec.get("policy") is None:
        rec.set("late_key", "set by the clean run")
    return {"saw_policy": rec.get("policy") is not None}


@agent("shape_ticket_reader")
def shape_ticket_reader(rec, payload):
    # Answers its ticket from a page it reads itself: refund when the page says so, reply otherwise.
    page = rec.ingest(payload["source"]) or ""
    choice = "refund" if "refund everything" in page else "reply"
    rec.set(f"{payload['ticket']}/decision", choice)
    if choice == "refund":
        rec.effect("refund", amount=500, ticket=payload["ticket"])
    return {"choice": choice}


@agent("shape_late_reader")
def shape_late_reader(rec, payload):
    return {"late": rec.get("late_key")}


def _record(name: str, roots: list[tuple[str, dict]]):
    graph = workspace_graph(name)
    session = GraphRecorder(graph=graph, workspace=name, sources=SOURCES, effects="sandbox")
    ids = [session.run_root(agent_name, payload)[0] for agent_name, payload in roots]
    session.flush()
    return graph, ids


def _walk(graph, name: str):
    session = GraphRecorder(graph=graph, workspace=name, sources=SOURCES, effects="held", excluded_sources={BAD},
                               incident=1)
    plan = compute_plan(graph=graph, session=session, source=BAD, incident=1)
    return plan, {o["action_id"]: o["status"] for o in plan.outcomes}


def test_a_diamond_re_runs_its_bottom_once():
    graph, (top, left, right, bottom) = _record("shape-diamond", [
        ("shape_reader", {"source": BAD, "key": "root"}),
        ("shape_copier", {"from": "root", "to": "left"}),
        ("shape_copier", {"from": "root", "to": "right"}),
        ("shape_joiner", {}),
    ])
    plan, status = _walk(graph, "shape-diamond")
    assert status == {top: S.POISONED, left: S.RERUN_CHANGED, right: S.RERUN_CHANGED, bottom: S.RERUN_CHANGED}
    assert plan.blast_radius == 4
    assert [o["action_id"] for o in plan.outcomes].count(bottom) == 1
    assert plan.counts[S.RERUN_CHANGED] == 3


def test_a_handoff_that_changes_target_supersedes_the_old_child_and_runs_a_new_one():
    graph, (clean, bad, router) = _record("shape-route", [
        ("shape_reader", {"source": CLEAN, "key": "policy"}),
        ("shape_reader", {"source": BAD, "key": "policy"}),
        ("shape_router", {"ticket": "t1"}),
    ])
    refunder = router + 1  # recorded depth first, right after the router that handed off to it
    plan, status = _walk(graph, "shape-route")
    assert status[bad] == S.POISONED and status[router] == S.RERUN_CHANGED
    assert status[refunder] == S.SUPERSEDED
    new = [o for o in plan.outcomes if o["status"] == S.NEW]
    assert [(o["agent"], o["parent_id"]) for o in new] == [("shape_mailer", router)]
    assert clean not in status  # the clean page's reader never depended on the bad page
    assert plan.counts == {S.POISONED: 1, S.RERUN_CHANGED: 1, S.RERUN_SAME: 0, S.SKIPPED: 0, S.SUPERSEDED: 1,
                           S.NEW: 1}


def test_a_re_run_that_writes_a_new_key_wakes_that_keys_later_readers():
    graph, (bad, flagger, late) = _record("shape-late", [
        ("shape_reader", {"source": BAD, "key": "policy"}),
        ("shape_flagger", {}),
        ("shape_late_reader", {}),
    ])
    plan, status = _walk(graph, "shape-late")
    # The late reader read nothing under `late_key` in the poisoned run, so no edge led to it: only the
    # re-run's new write brings it into the walk.
    assert status == {bad: S.POISONED, flagger: S.RERUN_CHANGED, late: S.RERUN_CHANGED}
    after = next(o["after"] for o in plan.outcomes if o["action_id"] == late)
    assert after == {"late": "set by the clean run"}


def test_ticket_work_that_read_the_source_is_re_run_with_it_masked_not_masked_itself():
    graph, (answer, copier) = _record("shape-ticket", [
        ("shape_ticket_reader", {"source": BAD, "ticket": "t1"}),
        ("shape_copier", {"from": "t1/decision", "to": "audit"}),
    ])
    plan, status = _walk(graph, "shape-ticket")
    # Masking it would leave t1 without an answer: it is answered again without the page.
    assert status == {answer: S.RERUN_CHANGED, copier: S.RERUN_CHANGED}
    after = next(o["after"] for o in plan.outcomes if o["action_id"] == answer)
    assert after == {"choice": "reply"}
    assert [(e["role"], e["kind"]) for e in plan.effects] == [("invalidated", "refund")]
    # Digesting the page without a ticket is still masked.
    graph, (digest,) = _record("shape-digest", [("shape_reader", {"source": BAD, "key": "policy"})])
    _, status = _walk(graph, "shape-digest")
    assert status == {digest: S.POISONED}


@pytest.mark.parametrize("name", ["shape-diamond"])
def test_the_walk_writes_nothing_to_the_graph(name):
    graph, _ = _record(name, [("shape_reader", {"source": BAD, "key": "root"}),
                              ("shape_copier", {"from": "root", "to": "left"})])
    before = graph.ro_query("MATCH (n) RETURN count(n)")[0][0], graph.ro_query("MATCH ()-[r]->() RETURN count(r)")[0][0]
    _walk(graph, name)
    assert (graph.ro_query("MATCH (n) RETURN count(n)")[0][0],
            graph.ro_query("MATCH ()-[r]->() RETURN count(r)")[0][0]) == before
