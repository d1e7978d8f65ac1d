"""A flagged source is quarantined in its workspace from the moment it is flagged, over every path that
records live work (in-process, a desk run, HTTP call by call, in batches, MCP), until a lead closes its
incident as a false alarm; each refused ingest is counted and audited (throttled)."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from compensation.models import AuditEvent
from provenance.recording import quarantine
from provenance.agents import agent
from provenance.desk.scenario import POISONED_PAGE
from provenance.llm import ModelClient
from provenance.models import SourceQuarantine, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run, record_root
from repairs.models import Incident
from repairs.services import RefusedTransition, close_incident
from tests.helpers import flag_and_repair, open_incident

pytestmark = pytest.mark.django_db(transaction=True)
POISON = "no checks"  # the poisoned page's words ("...gets a full refund, no checks")


@agent("quarantine_probe")
def quarantine_probe(rec, payload: dict) -> dict:
    content = rec.ingest(payload["source"])
    if content is not None:
        rec.set("probe/seen", content)
    return {"got": content is not None}


def _memory(workspace: str) -> str:
    return json.dumps(export_state(workspace=workspace))


def test_record_after_the_canonical_repair_leaves_the_flagged_text_out_of_memory():
    desk_run(workspace="qr")
    incident = flag_and_repair("qr")
    assert incident.status == "repaired" and POISON not in _memory("qr")
    ids = record_root(workspace="qr", agent="research", payload={"source": POISONED_PAGE})
    assert len(ids) == 1 and POISON not in _memory("qr")
    row = SourceQuarantine.objects.get(incident_id=incident.pk)
    assert row.attempts == 1 and row.lifted_at is None
    event = AuditEvent.objects.get(action="source.quarantine_refused")
    assert (event.incident_id, event.data["source"], event.data["attempts"]) == (incident.pk, POISONED_PAGE, 1)


def test_a_false_alarm_close_lifts_the_quarantine_and_the_text_reads_again(lead):
    # The red case of the quarantine: once lifted, the same recording does put the text back.
    desk_run(workspace="qf")
    incident = flag_and_repair("qf")
    incident.workspace.members.add(lead)
    with pytest.raises(RefusedTransition):  # closing it again without calling it a false alarm changes nothing
        close_incident(incident=close_incident(incident=incident, actor=lead, reason="done", via="admin"),
                       actor=lead, reason="again", via="admin")
    assert quarantine.held(workspace=incident.workspace) == {POISONED_PAGE: incident.pk}
    record_root(workspace="qf", agent="research", payload={"source": POISONED_PAGE})
    assert POISON not in _memory("qf")
    with pytest.raises(ValueError):
        close_incident(incident=incident, actor=lead, reason="", via="admin", false_alarm=True)
    close_incident(incident=Incident.objects.get(pk=incident.pk), actor=lead, reason="the partner blog was right",
                   via="admin", false_alarm=True)
    assert quarantine.held(workspace=incident.workspace) == {}
    lifted = AuditEvent.objects.get(action="source.quarantine_lifted")
    assert lifted.actor == lead and "partner blog was right" in lifted.reason and lifted.data["attempts"] == 1
    record_root(workspace="qf", agent="research", payload={"source": POISONED_PAGE})
    assert POISON in _memory("qf")


def test_a_flag_holds_before_its_repair_runs_and_attempts_are_audited_throttled():
    desk_run(workspace="qh")
    incident = open_incident("qh")  # repair not run yet
    for _ in range(3):
        record_root(workspace="qh", agent="quarantine_probe", payload={"source": POISONED_PAGE})
    assert "probe/seen" not in _memory("qh")
    assert SourceQuarantine.objects.get(incident_id=incident.pk).attempts == 3
    assert AuditEvent.objects.filter(action="source.quarantine_refused").count() == 1  # one per minute
    assert AuditEvent.objects.filter(action="source.quarantined", incident_id=incident.pk).count() == 1
    # Another source of the workspace still reads.
    record_root(workspace="qh", agent="quarantine_probe", payload={"source": "acme/refund-policy"})
    assert "probe/seen" in _memory("qh")


def test_a_desk_run_after_the_flag_records_without_the_quarantined_page():
    desk_run(workspace="qd")
    incident = open_incident("qd")
    desk_run(workspace="qd")  # replaces the run (closing the incident); the quarantine stays
    assert Incident.objects.get(pk=incident.pk).status == "closed"
    assert POISON not in _memory("qd")
    assert SourceQuarantine.objects.get(incident_id=incident.pk).attempts == 1


def test_the_model_cache_never_serves_a_new_action_an_answer_from_the_quarantined_text(monkeypatch):
    desk_run(workspace="qc")
    asked: list[tuple[str, str]] = []
    original = ModelClient.complete

    def spy(self, task, input, facts=None, **kwargs):
        asked.append((self.request_key(task, input, facts), json.dumps(input)))
        return original(self, task, input, facts, **kwargs)

    monkeypatch.setattr(ModelClient, "complete", spy)
    record_root(workspace="qc", agent="research", payload={"source": POISONED_PAGE})
    poisoned_keys = {k for k, text in asked if POISON in text}
    assert poisoned_keys  # before the flag the page's text is in the prompt: that answer is cached
    asked.clear()
    open_incident("qc")
    record_root(workspace="qc", agent="research", payload={"source": POISONED_PAGE})
    record_root(workspace="qc", agent="triage", payload=Workspace.objects.get(name="qc").tickets.first().as_payload())
    assert asked  # the new actions did ask the model...
    assert not poisoned_keys & {k for k, _ in asked}  # ...never with a key whose answer came from the text
    assert not any(POISON in text for _, text in asked)


@pytest.fixture
def recording_client(django_user_model):
    admin = django_user_model.objects.create_superuser("q-root", "q@example.com", "pass-1234-kintsugi")

    def make(name: str):
        desk_run(workspace=name)
        ws = Workspace.objects.get(name=name)
        register_agent(workspace=ws, name="remote_research", replay="http://127.0.0.1:9/replay", actor=admin,
                       reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return ws, client, key
    return make


def _post(client, path, body, status=200):
    response = client.post(f"/api/v1/recording/{path}", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def test_over_http_a_quarantined_ingest_answers_null_content_naming_the_incident(recording_client):
    ws, client, _ = recording_client("qhttp")
    incident = open_incident("qhttp")
    a = _post(client, "actions/", {"agent": "remote_research", "payload": {}}, 201)["action"]
    answer = _post(client, f"actions/{a}/ingest/", {"source": POISONED_PAGE})
    assert answer == {"source": POISONED_PAGE, "content": None, "quarantined": True, "incident": incident.pk}
    clean = _post(client, f"actions/{a}/ingest/", {"source": "acme/refund-policy"})
    assert clean["content"] and "quarantined" not in clean
    results = _post(client, f"actions/{a}/calls/", {"calls": [
        {"op": "ingest", "source": POISONED_PAGE}, {"op": "finish", "decision": {"keys": []}}]})["results"]
    assert results[0]["quarantined"] is True and results[1]["committed"] is True
    done = _post(client, "batch/", {"actions": [{"agent": "remote_research", "payload": {}, "parent": None, "calls": [
        {"op": "ingest", "source": POISONED_PAGE}, {"op": "finish", "decision": {"keys": []}}]}]}, 201)
    assert done["results"][0][0] == {"source": POISONED_PAGE, "content": None, "quarantined": True,
                                     "incident": incident.pk}
    assert SourceQuarantine.objects.get(incident_id=incident.pk).attempts == 3
    detail = APIClient()
    detail.force_authenticate(user=_superuser())
    assert detail.get(f"/api/v1/incidents/{incident.pk}/").json()["quarantine"]["attempts"] == 3


def _superuser():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="q-root")


def test_the_incident_page_counts_refused_ingests_and_a_lead_lifts_the_quarantine_there(client, make_user):
    desk_run(workspace="qadmin")
    incident = open_incident("qadmin")
    lead = make_user("qlead", roles=["Support lead"], workspaces=[incident.workspace])
    lead.is_staff = True
    lead.save()
    record_root(workspace="qadmin", agent="research", payload={"source": POISONED_PAGE})
    client.force_login(lead)
    page = client.get(f"/admin/repairs/incident/{incident.pk}/change/").content.decode()
    assert 'id="quarantine" data-held="true" data-attempts="1"' in page
    close_page = client.get(f"/admin/repairs/incident/{incident.pk}/close/").content.decode()
    assert 'id="false-alarm"' in close_page
    client.post(f"/admin/repairs/incident/{incident.pk}/close/", {"reason": "checked with the partner",
                                                                  "false_alarm": "on"})
    assert Incident.objects.get(pk=incident.pk).status == "closed"
    assert quarantine.held(workspace=incident.workspace) == {}
