"""A live recording's side of containment (provenance.recording.containment): which of its actions read through a
flag's containment, and keeping their effects held. Kept apart from the flag's side, which takes the
workspace graph's lock (provenance.recording.services), so the recorder can use it."""
from __future__ import annotations

from provenance.graph import containment_queries as cq
from provenance.graph.graph import Graph
from provenance.models import Containment, HeldEffect, Workspace


def taint_of(session, record) -> tuple[int, ...]:
    """The incidents whose containment `record` read through: around a contained version, a version
    contained since it was read, a write of an action of its session that did, or handed off from one."""
    found: set[int] = set()
    for r in record.reads:
        found.update(r.contained or ())
        found.update(session.contained_facts.get(r.fact_id, ()))
        found.update(session.tainted.get(r.writer, ()))
    if record.parent is not None:
        found.update(session.tainted.get(record.parent, ()))
    return tuple(sorted(found))


def note_lineage(session, record) -> None:
    """Remember, for a recording staged action by action, what `record` depends on in its own session
    (its parent, the actions of the session whose writes it read) and the committed versions it read:
    what contained_by() asks again when a later action of the recording asks for an effect."""
    loaded = session._loaded_ids[1]
    session.lineage[record.id] = (
        record.parent, tuple(r.fact_id for r in record.reads if r.fact_id is not None and r.fact_id <= loaded),
        tuple(r.writer for r in record.reads if r.writer is not None and r.writer != record.id))


def contained_by(session, record) -> tuple[int, ...]:
    """taint_of(), after asking the graph whether the committed versions that `record`, or an action of
    its recording it depends on (its parent, an action whose writes it read, and theirs), read were
    contained since: a flag between those reads and this effect. An action handed off by one that read
    the poisoned version before the flag is inside the source's radius: its effects are held too."""
    loaded = session._loaded_ids[1]
    committed = [r.fact_id for r in record.reads if r.fact_id is not None and r.fact_id <= loaded]
    todo, deps = [record.parent, *(r.writer for r in record.reads)], set()
    while todo:
        action = todo.pop()
        if action in session.lineage and action not in deps:
            deps.add(action)
            parent, facts, writers = session.lineage[action]
            committed += facts
            todo += [parent, *writers]
    if committed:
        session.contained_facts.update(marks_of(session.graph, committed))
    for action in sorted(deps):  # opened in id order: a dependency's own dependencies come first
        parent, facts, writers = session.lineage[action]
        found = set(session.tainted.get(action, ()))
        for fact_id in facts:
            found.update(session.contained_facts.get(fact_id, ()))
        for other in (parent, *writers):
            found.update(session.tainted.get(other, ()))
        if found:
            session.tainted[action] = tuple(sorted(found))
    return taint_of(session, record)


def repairing(session) -> tuple[int, ...]:
    """The incident whose repair re-runs this session's actions (a replay of an action inside the
    radius): its effects are held, and that repair settles them (performed only once approved)."""
    return (session.incident,) if session.effects_mode == "held" and session.incident is not None else ()


def marks_of(graph: Graph, fact_ids) -> dict[int, tuple[int, ...]]:
    """{fact id: incidents} of those of `fact_ids` that are contained now."""
    asked = ask_marks(fact_ids)
    return marks_from(graph.ro_query(*asked)) if asked is not None else {}


def ask_marks(fact_ids) -> tuple[str, dict] | None:
    """The query marks_of() sends and its parameters (None: no ids), for a caller that sends it in a
    pipeline with others; its rows go to marks_from()."""
    ids = sorted(set(fact_ids))
    return (cq.CONTAINED_OF, {"ids": ids}) if ids else None


def marks_from(rows) -> dict[int, tuple[int, ...]]:
    return {r.id: tuple(r.contained) for r in rows}


def ended_since(incidents) -> bool:
    """Whether any of these containments has ended (a recording that read through it is stale)."""
    return bool(incidents) and Containment.objects.filter(incident_id__in=list(incidents)).exclude(
        ended=Containment.Ended.HOLDING).exists()


def hold_effects(*, workspace: str, run_number: int, effects: list[tuple[dict, dict, tuple[int, ...]]]) -> None:
    """Keep the held effects of a flush for their repair (in the flush's transaction, as dispatching is)."""
    ws_id = Workspace.objects.filter(name=workspace).values_list("pk", flat=True).get()
    HeldEffect.objects.bulk_create([HeldEffect(
        workspace_id=ws_id, incident_id=incidents[0], run_number=run_number, effect_id=row["id"],
        action_id=row["action"], kind=row["kind"], ticket=row["ticket"] or "", amount_cents=row["amount"],
        currency=row["currency"], details=details) for row, details, incidents in effects], ignore_conflicts=True)
