"""The harm stops at the flag: what the flagged source put into memory is contained in the flag's own
transaction, live reads resolve around it (in-process, over HTTP, in batches), the effects of recordings
that read through it are held until the repair settles them, and only the repair landing or a lead's
false alarm ends it."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from provenance.graph import containment_queries as cq
from provenance.agents import agent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import Containment, HeldEffect, LedgerEntry, Ticket, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run, record_root
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
    # The catch-up re-ran what read through the containment, and the desk is its clean run.
    assert incident.plan["caught_up"] >= len(payloads)
    desk_run(workspace="ct-clean", exclude_source=POISONED_PAGE)
    for p in payloads:
        record_root(workspace="ct-clean", agent="triage", payload=p)
    assert export_state(workspace="ct") == export_state(workspace="ct-clean")
    assert POISON not in json.dumps(_read_probe("ct"))


def test_with_the_repair_failed_reads_of_derived_facts_never_return_the_poisoned_versions(monkeypatch):
    desk_run(workspace="cf")
    record_root(workspace="cf", agent="vip_digest", payload={})  # a fact derived from the poisoned vip_rules
    before = _read_probe("cf")
    assert POISON in json.dumps(before["vip_rules"]) and POISON in json.dumps(before["vip_digest"])
    incident = open_incident("cf")

    def broken(*args, **kwargs):
        raise RuntimeError("the walk broke")

    monkeypatch.setattr("repairs.job.walk", broken)
    incident = run_repair(incident_id=incident.pk)
    assert incident.status == Incident.Status.FAILED
    after = _read_probe("cf")
    assert POISON not in json.dumps(after)
    assert after["vip_rules"] is not None and after["vip_digest"] is None  # the clean version; not found
    # A person ending nothing keeps it: closing the failed incident (not a false alarm) still contains.
    close_incident(incident=incident, actor=incident.flagged_by, reason="gave up for today", via="cli")
    assert POISON not in json.dumps(_read_probe("cf"))


def test_closing_as_a_false_alarm_restores_the_contained_versions_exactly_and_releases_held_effects():
    desk_run(workspace="cfa")
    nodes = _fact_nodes("cfa")
    paid = _payments("cfa")
    incident = open_incident("cfa")
    graph = workspace_graph("cfa")
    assert graph.ro_query(cq.CONTAINED_COUNT, {"incident": incident.pk})[0].n > 0
    assert _fact_nodes("cfa") != nodes
    payload = _vip_payloads("cfa", 1)[0]
    record_root(workspace="cfa", agent="triage", payload=payload)
    assert _payments("cfa") == paid
    held = list(HeldEffect.objects.filter(incident_id=incident.pk).values_list("effect_id", flat=True))
    assert held
    close_incident(incident=incident, actor=incident.flagged_by, reason="the partner blog was right", via="cli",
                   false_alarm=True)
    after = _fact_nodes("cfa")
    assert {k: after[k] for k in nodes} == nodes  # every version the flag contained, exactly as before it
    assert set(HeldEffect.objects.filter(incident_id=incident.pk).values_list("status", flat=True)) == {"released"}
    assert _payments("cfa") == paid + HeldEffect.objects.filter(incident_id=incident.pk, kind="refund").count()
    live = graph.ro_query("MATCH (e:Effect) WHERE e.id IN $ids RETURN e.held, e.incident", {"ids": held})
    assert {tuple(r) for r in live} == {(False, None)}
    assert POISON in json.dumps(_read_probe("cfa")["vip_rules"])
    assert Containment.objects.get(incident_id=incident.pk).ended == "false_alarm"


@pytest.fixture
def remote_triage(django_user_model):
    admin = django_user_model.objects.create_superuser("c-root", "c@example.com", "pass-1234-kintsugi")

    def make(name: str):
        desk_run(workspace=name)
        ws = Workspace.objects.get(name=name)
        register_agent(workspace=ws, name="remote_triage", replay="http://127.0.0.1:9/replay", actor=admin,
                       reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        staff = APIClient()
        staff.force_authenticate(user=admin)
        return ws, client, staff
    return make


def _post(client, path, body, status=200):
    response = client.post(f"/api/v1/recording/{path}", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


REFUND = {"kind": "refund", "amount": 12000, "ticket": "t05", "idempotency_key": "pay-t05"}


def test_over_http_reads_resolve_around_the_containment_and_effects_answer_held(remote_triage):
    ws, client, staff = remote_triage("chttp")
    # Opened before the flag: it reads the poisoned rules, and its refund is asked for after the flag.
    early = _post(client, "actions/", {"agent": "remote_triage", "payload": {"ticket": "t05"}}, 201)["action"]
    assert POISON in json.dumps(_post(client, f"actions/{early}/get/", {"key": "vip_rules"})["value"])
    paid = _payments("chttp")
    incident = open_incident("chttp")
    answer = _post(client, f"actions/{early}/effect/", REFUND)
    assert (answer["perform"], answer["held"], answer["incident"]) == (False, True, incident.pk)
    assert _post(client, f"actions/{early}/finish/", {"decision": {"choice": "refund"}})["committed"] is True
    # Opened after the flag: the contained version does not exist for it.
    late = _post(client, "actions/", {"agent": "remote_triage", "payload": {"ticket": "t06"}}, 201)["action"]
    got = _post(client, f"actions/{late}/get/", {"key": "vip_rules"})
    assert got["found"] is True and POISON not in json.dumps(got["value"])
    answer = _post(client, f"actions/{late}/effect/", REFUND | {"ticket": "t06", "idempotency_key": "pay-t06"})
    assert (answer["perform"], answer["held"], answer["incident"]) == (False, True, incident.pk)
    _post(client, f"actions/{late}/finish/", {"decision": {"choice": "refund"}})
    # A whole recording in one request reads the same way.
    done = _post(client, "batch/", {"actions": [{"agent": "remote_triage", "payload": {"ticket": "t07"}, "calls": [
        {"op": "get", "key": "vip_rules"}, {"op": "effect", **REFUND, "ticket": "t07", "idempotency_key": "p7"},
        {"op": "finish", "decision": {"choice": "refund"}}]}]}, 201)
    assert POISON not in json.dumps(done["results"][0][0]["value"])
    assert (done["results"][0][1]["perform"], done["results"][0][1]["held"]) == (False, True)
    assert _payments("chttp") == paid  # 0 effects performed by recordings that read through the containment
    assert HeldEffect.objects.filter(incident_id=incident.pk, status="held").count() == 3
    # The lead sees it: contained facts, held effects with their money, flag -> containment time.
    shown = staff.get(f"/api/v1/incidents/{incident.pk}/").json()["containment"]
    assert shown["holding"] is True and shown["contained_facts"] > 0
    assert shown["held_effects"]["held"] == 3 and shown["held_effects"]["held_refund_cents"] == {"USD": 36000}
    assert 0 <= shown["flag_to_containment_seconds"] < 2


def test_the_incident_page_and_metrics_show_the_containment_and_its_held_money(client, django_user_model):
    desk_run(workspace="cpage")
    incident = open_incident("cpage")
    for p in _vip_payloads("cpage", 2):
        record_root(workspace="cpage", agent="triage", payload=p)
    held = HeldEffect.objects.filter(incident_id=incident.pk, status="held")
    refunds = sum(held.filter(kind="refund").values_list("amount_cents", flat=True))
    client.force_login(django_user_model.objects.create_superuser("c-page", "p@example.com", "pass-1234-kintsugi"))
    page = client.get(f"/admin/repairs/incident/{incident.pk}/change/").content.decode()
    row = Containment.objects.get(incident_id=incident.pk)
    assert f'id="containment" data-holding="true" data-facts="{row.facts}" data-held="{held.count()}"' in page
    assert (f"${refunds / 100:,.2f} in refunds" in page) == bool(refunds)
    text = client.get("/metrics").content.decode()
    assert f"kintsugi_contained_facts {float(row.facts)}" in text
    assert f"kintsugi_held_effects {float(held.count())}" in text
    assert "kintsugi_flag_to_containment_seconds_count 1.0" in text
