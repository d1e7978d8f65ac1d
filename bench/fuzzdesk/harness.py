"""Records a fuzz desk through kintsugi's recorder, flags its flagged sources one after the other,
repairs each in this process, and compares the repaired state with the reference's clean run.

The desk's agents are four in-process agents that run whatever program their payload carries, so a
repair's re-run executes exactly the program the original ran, against the memory the repair gives it.
"""
from __future__ import annotations

import json
import uuid

from django.db import transaction

from bench.fuzzdesk import reference
from bench.fuzzdesk.programs import AGENTS, DECLARED, amount_of, body_of, carries_marker, commit_order, derive
from provenance.agents import agent
from provenance.graph.graph import workspace_graph
from provenance.models import Source, Ticket, Workspace
from provenance.recording.recorder import GraphRecorder
from provenance.recording.selectors import export_state
from repairs import deep_check
from repairs.job import run_repair
from repairs.models import Incident
from repairs.services import flag_source


PREFIX = "fuzz_agent"  # the in-process agents' names: fuzz_agent_0 .. fuzz_agent_3


def _child_agent(ops: list, prefix: str) -> str:
    return f"{prefix}_{len(ops) % AGENTS}"


def interpret(rec, payload: dict, *, prefix: str = PREFIX) -> dict:
    """Run the program in `payload` with recorder `rec` (kintsugi's, or kintsugi_client's RemoteRecorder:
    the same calls); a handoff goes to the agent of `prefix` that the child's program picks."""
    ticket = payload.get("ticket")
    env: dict = {}
    choice = None

    def values(names):
        return [env.get(n) for n in names]

    for op in payload["ops"]:
        kind = op[0]
        if kind == "get":
            env[op[2]] = rec.get(op[1])
        elif kind == "ingest":
            env[op[2]] = rec.ingest(op[1])
        elif kind == "fill":
            value = rec.get(op[1])
            if value is None:
                value = rec.ingest(op[2])
                if value is not None:
                    rec.set(op[1], value)
            env[op[3]] = value
        elif kind == "set":
            rec.set(op[1], derive(op[2], values(op[3])))
        elif kind == "decide" and ticket:
            choice = "refund" if carries_marker(values(op[1])) else "reply"
        elif kind == "refund" and ticket:
            rec.effect("refund", amount=amount_of(values(op[1])), ticket=ticket)
        elif kind == "email" and ticket:
            rec.effect("email", amount=0, ticket=ticket, to=f"{ticket}@example.com",
                       subject=f"About your order", body=body_of(values(op[1])))
        elif kind == "pay" and ticket:
            rec.effect(DECLARED["name"], amount=amount_of(values(op[1])), ticket=ticket,
                       **{DECLARED["target"]: f"acct-{ticket}"})
        elif kind == "handoff":
            chosen = op[2] if carries_marker(values(op[1])) else op[3]
            if chosen:
                rec.handoff(_child_agent(chosen, prefix), {"ticket": ticket, "ops": chosen})
    return {"choice": choice, "level": None} if choice else {"steps": len(payload["ops"])}


def _register(name: str) -> None:
    def run(rec, payload):
        return interpret(rec, payload)
    agent(name)(run)


for _i in range(AGENTS):
    _register(f"{PREFIX}_{_i}")


def record(desk: dict, *, workspace: str | None = None, clean: bool = False) -> Workspace:
    """A fresh workspace holding one recording of `desk`: poisoned, or `clean` (its flagged sources
    excluded from the start)."""
    return record_roots(desk, [(r["agent"], {"ticket": r["ticket"], "ops": r["ops"]}, beside)
                               for r, beside in commit_order(desk)],
                        name=workspace or f"fz-{uuid.uuid4().hex[:10]}", clean=clean)


def record_roots(desk: dict, roots: list[tuple], *, name: str, clean: bool = False,
                 subject: str = "order", body: str = "where is it") -> Workspace:
    """A fresh workspace `name` with the desk's sources and tickets, and `roots` (agent, payload) recorded
    in order, depth first: the desk's flagged sources excluded when `clean`. A root given as (agent,
    payload, True) was recorded beside the one before it: its reads do not see that root's writes."""
    with transaction.atomic():
        ws = Workspace.objects.create(name=name, run_number=1)
        Source.objects.bulk_create(Source(workspace=ws, source_id=s, title=s, content=c)
                                   for s, c in desk["sources"].items())
        Ticket.objects.bulk_create(Ticket(workspace=ws, ticket_id=t, customer_name=f"Customer {t}",
                                          customer_email=f"{t}@example.com", subject=subject, body=body,
                                          amount_cents=paid, payment_reference=f"ch_{t}")
                                   for t, paid in desk["tickets"].items())
    for baseline in (False, True):
        workspace_graph(name, baseline=baseline).delete()
    session = GraphRecorder(graph=workspace_graph(name), workspace=name, sources=dict(desk["sources"]),
                               effects="live", run_number=1, load=False,
                               excluded_sources=desk["flagged"] if clean else ())
    starts: list[float] = []
    for agent_name, payload, *beside in roots:
        start = session.next_seq
        session.run_root(agent_name, payload, snapshot=starts[-1] if beside and beside[0] else None)
        starts.append(start)
    session.flush()
    return ws


def repair(ws: Workspace, desk: dict, *, actor) -> list[Incident]:
    incidents = []
    for source in desk["flagged"]:
        incident = flag_source(workspace=ws, source_id=source, actor=actor, reason="fuzz: poisoned",
                               via=Incident.Via.CLI)
        incidents.append(run_repair(incident_id=incident.pk) or Incident.objects.get(pk=incident.pk))
    return incidents


def state(ws: Workspace) -> dict:
    """The repaired workspace in the reference's terms: facts, decisions, live effects by content."""
    found = export_state(workspace=ws.name)
    graph = workspace_graph(ws.name)
    rows = graph.ro_query("MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE e.live = true "
                          "RETURN e.kind, e.ticket, e.amount, e.details")
    effects = []
    for kind, ticket, amount, details in rows:
        body = json.loads(details).get("body") if kind == "email" and details else None
        effects.append({"kind": kind, "ticket": ticket, "amount_cents": amount,
                        "digest": reference.effect_digest(kind, ticket, amount, body)})
    return {
        "facts": {f["key"]: f["value"] for f in found["facts"]},
        "decisions": {d["ticket"]: d["choice"] for d in found["decisions"]},
        "effects": sorted(effects, key=lambda e: (e["kind"], e["ticket"], e["amount_cents"], e["digest"])),
    }


def differences(desk: dict, ws: Workspace, incidents: list[Incident]) -> list[str]:
    """What differs between the repaired workspace and the reference's clean run ([] when exact)."""
    expected, got = reference.run(desk, clean=True), state(ws)
    out = []
    for part in ("facts", "decisions", "effects"):
        if expected[part] != got[part]:
            out.append(f"{part}: expected {json.dumps(expected[part], sort_keys=True)} "
                       f"got {json.dumps(got[part], sort_keys=True)}")
    for incident in incidents:
        if incident.status != Incident.Status.REPAIRED:
            out.append(f"incident #{incident.pk} ({incident.source_id}) ended {incident.status}: {incident.error}")
    return out


def _counts(verification: dict | None) -> tuple:
    v = verification or {}
    return tuple(v.get(k) for k in ("facts", "decisions", "effects"))


def verifications(incidents: list[Incident]) -> list[str]:
    """Both verifications of the repaired desk, which must agree: each repair's own (the radius check,
    repairs.verify_radius) and the whole-desk replay of the last one (repairs.deep_check, `verify --full`),
    which leaves out every source flagged before it too. [] when both are clean."""
    finished = (Incident.Status.REPAIRED, Incident.Status.NEEDS_ATTENTION)
    if not incidents or any(i.status not in finished for i in incidents):
        return []  # a repair that did not finish is told by differences()
    radius = {i.pk: _counts(i.verification) for i in incidents}
    scopes = {i.verification.get("scope") for i in incidents if i.verification}
    full = deep_check.verify_full(incident=incidents[-1], actor=None, reason="fuzz: both verifications",
                                  via=Incident.Via.CLI)
    radius_clean = all(c == (0, 0, 0) for c in radius.values()) and scopes == {"radius"}
    full_clean = _counts(full) == (0, 0, 0)
    if radius_clean and full_clean:
        return []
    said = ", ".join(f"#{pk} {c}" for pk, c in radius.items())
    verdict = "disagree" if radius_clean != full_clean else "agree the repair differs"
    rows = json.dumps(full.get("rows", [])[:3], sort_keys=True)
    return [f"verifications {verdict}: radius (facts, decisions, effects) {said} (scopes {sorted(map(str, scopes))}); "
            f"full replay {_counts(full)}: {rows}"]


def check(desk: dict, *, actor) -> list[str]:
    ws = record(desk)
    incidents = repair(ws, desk, actor=actor)
    return differences(desk, ws, incidents) + verifications(incidents)
