"""The harm stops at the flag: what the flagged source put into memory is contained in the flag's own
transaction, live reads resolve around it (in-process, over HTTP, in batches), the effects of recordings
that read through it are held until the repair settles them, and only the repair landing or a lead's
false alarm ends it."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from provenance import containment_queries as cq
from provenance.agents import agent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph import workspace_graph
from provenance.models import Containment, HeldEffect, LedgerEntry, Ticket, Workspace
from provenance.onboarding import issue_agent_token, register_agent
from provenance.selectors import export_state
from provenance.services import desk_run, record_root
from repairs.job import run_repair
from repairs.models import Incident
from repairs.services import close_incident
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)
POISON = "no checks"  # the poisoned page's words ("...gets a full refund, no checks")


@agent("vip_digest")
def vip_digest(rec, payload: dict) -> dict:
    """Derives a fact from vip_rules: its version carries the poisoned page's lineage."""
    rules = rec.get("vip_rules")
    rec.set("vip_digest", {"rules": rules})
    return {"digested": rules is not None}


@agent("vip_reader")
def vip_reader(rec, payload: dict) -> dict:
    rec.set("probe/read", {"vip_rules": rec.get("vip_rules"), "vip_digest": rec.get("vip_digest")})
    return {"ok": True}


def _vip_payloads(workspace: str, n: int) -> list[dict]:
    tickets = Ticket.objects.filter(workspace__name=workspace).order_by("ticket_id")
    return [t.as_payload() for t in tickets if "vip" in t.body.lower()][:n]


def _payments(workspace: str) -> int:
    return LedgerEntry.objects.filter(workspace__name=workspace, kind=LedgerEntry.Kind.PAYMENT).count()


def _read_probe(workspace: str) -> dict:
    record_root(workspace=workspace, agent="vip_reader", payload={})
    return next(f["value"] for f in export_state(workspace=workspace)["facts"] if f["key"] == "probe/read")


def _fact_nodes(workspace: str) -> dict:
    rows = workspace_graph(workspace).ro_query("MATCH (f:Fact) RETURN f.id, properties(f)")
    return {r[0]: r[1] for r in rows}


def test_a_recording_committed_between_flag_and_apply_pays_nothing_live_and_the_repair_settles_it():
    # The red case is the behaviour before containment: such a recording read vip_rules as the poisoned
    # page wrote it and paid a full refund live, before the repair could stop it.
    desk_run(workspace="ct")
    payloads = _vip_payloads("ct", 4)
    incident = open_incident("ct")
    row = Containment.objects.get(incident_id=incident.pk)
    assert row.contained_at is not None and row.facts > 0 and row.seconds < 2
    paid = _payments("ct")
    for p in payloads:
        record_root(workspace="ct", agent="triage", payload=p)
    assert _payments("ct") == paid  # nothing left the building
    held = HeldEffect.objects.filter(incident_id=incident.pk)
    assert held.count() > 0 and set(held.values_list("status", flat=True)) == {"held"}
    incident = run_repair(incident_id=incident.pk)
    assert incident.status == Incident.Status.REPAIRED, incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert not held.filter(status="held").exists()
    performed = held.filter(status="performed")
    assert _payments("ct") == paid + performed.filter(kind="refund").count()
    assert Containment.objects.get(incident_id=incident.pk).ended == "repaired"
    assert POISON not in json.dumps(_read_probe("ct"))
