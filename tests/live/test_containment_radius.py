"""Effects of actions inside the flagged source's radius are held even when the action itself read nothing
contained: an action handed off, after the flag, by one of its recording that read the poisoned version
before it; and a remote agent's replay of a radius action during the repair. Each answers
`perform: false, held: true` with the incident that settles it."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from provenance.models import HeldEffect, LedgerEntry, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import desk_run
from repairs.job import run_repair
from repairs.models import RepairEffect
from rest_framework.test import APIClient
from tests.agents.test_replay_failures import Agent, callback, recorded
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)
POISON = "no checks"


def _post(client, path, body, status=200):
    response = client.post(f"/api/v1/recording/actions/{path}", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def test_a_handoff_opened_after_the_flag_from_an_action_that_read_the_poison_before_it_is_held():
    # The red case: the child read nothing contained itself, so it was told to perform, and its refund
    # left live although its recording acted on the poisoned rules.
    desk_run(workspace="crad")
    ws = Workspace.objects.get(name="crad")
    admin = get_user_model().objects.create_superuser("crad-root", "r@example.com", "pass-1234-kintsugi")
    register_agent(workspace=ws, name="remote_triage", replay="http://127.0.0.1:9/replay", actor=admin,
                   reason="test", via="cli")
    _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    root = _post(client, "", {"agent": "remote_triage", "payload": {"ticket": "t05"}}, 201)["action"]
    assert POISON in json.dumps(_post(client, f"{root}/get/", {"key": "vip_rules"})["value"])
    _post(client, f"{root}/handoff/", {"agent": "remote_triage", "payload": {"ticket": "t05", "step": "pay"}})
    assert _post(client, f"{root}/finish/", {"decision": {"choice": "refund"}})["committed"] is False
    paid = LedgerEntry.objects.filter(workspace=ws, kind=LedgerEntry.Kind.PAYMENT).count()
    incident = open_incident("crad")
    child = _post(client, "", {"agent": "remote_triage", "payload": {"ticket": "t05", "step": "pay"},
                               "parent": root}, 201)["action"]
    answer = _post(client, f"{child}/effect/", {"kind": "refund", "amount": 12000, "ticket": "t05",
                                                "idempotency_key": "pay-t05"})
    assert (answer["perform"], answer["held"], answer.get("incident")) == (False, True, incident.pk)
    assert _post(client, f"{child}/finish/", {"decision": {"paid": True}})["committed"] is True
    assert LedgerEntry.objects.filter(workspace=ws, kind=LedgerEntry.Kind.PAYMENT).count() == paid
    assert HeldEffect.objects.filter(incident_id=incident.pk, status="held", ticket="t05").count() == 1


def test_a_remote_agents_replay_during_the_repair_is_told_which_incident_holds_its_effects():
    answers = []

    def replay(request):
        answers.append((request["purpose"], callback(request, "effect", {
            "kind": "refund", "amount": 100, "ticket": "t1", "idempotency_key": "r"})))
        callback(request, "finish", {"decision": {"days": 0}})

    ws = recorded("crad-replay", Agent(replay))
    incident = run_repair(incident_id=open_incident(ws.name, "kb/page").pk)
    assert incident.plan is not None, incident.error  # walked and applied (its verification is not the point)
    repair = [a for purpose, a in answers if purpose == "repair"]
    assert repair and all(status == 200 for status, _ in repair)
    assert {(a["perform"], a["held"], a.get("incident")) for _, a in repair} == {(False, True, incident.pk)}
    # The repair settles it: recorded in its plan as an effect held for a person's approval.
    assert RepairEffect.objects.filter(incident=incident, kind="refund", ticket="t1").exists()
    # Replays that are no repair (the verification baseline) hold every effect but name no incident.
    assert all("incident" not in a for purpose, (_, a) in answers if purpose != "repair")
