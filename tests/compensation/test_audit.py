import csv
import io
import json

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from core.audit import chains, export, trail
from compensation.models import AuditEvent
from compensation.review.services import approve_item, reject_item
from repairs.services import close_incident

pytestmark = pytest.mark.django_db


@pytest.fixture
def incident(canonical):
    return canonical.incident


@pytest.fixture
def people(canonical):
    return canonical.people


def _verify(capsys):
    try:
        call_command("verify_audit")
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def test_every_state_change_is_recorded_with_who_why_and_from_where(incident, people):
    item = incident.compensation_items.get(kind="refund_reversal", ticket_id="t05")
    approve_item(item=item, actor=people.reviewer, reason="matches the ledger", via="api")
    close_incident(incident=incident, actor=people.lead, reason="done", via="admin")
    events = list(AuditEvent.objects.filter(incident=incident).order_by("seq"))
    incident_events = [(e.action, e.from_status, e.to_status, e.via) for e in events if e.subject_type == "incident"]
    assert incident_events == [("incident.flagged", "", "open", "cli"), ("incident.repairing", "open", "repairing", "worker"),
                               ("incident.repaired", "repairing", "repaired", "worker"),
                               ("incident.closed", "repaired", "closed", "admin")]
    assert events[0].actor == people.lead_reviewer and events[0].reason == "poisoned partner page"
    actions = [e.action for e in events]
    assert actions.count("item.drafted") == 10 and actions.count("item.cancelled") == 9  # the approved one stays
    approved = next(e for e in events if e.action == "item.approved")
    assert (approved.actor_name, approved.via, approved.reason) == ("reviewer1", "api", "matches the ledger")


def test_an_incidents_events_form_its_workspaces_chain_from_seq_1(incident, people):
    # Every event of the incident, from its flag on, is in its workspace's chain, numbered without gaps.
    chain = list(chains.chain_events(incident.workspace_id).order_by("seq"))
    assert chain and {e.workspace_id for e in chain} == {incident.workspace_id}
    assert [e.seq for e in chain] == list(range(1, len(chain) + 1)) and chain[0].action == "incident.flagged"
    assert {e.pk for e in chain} >= set(AuditEvent.objects.filter(incident=incident).values_list("pk", flat=True))
    # Not given a workspace, an event with an incident goes to the incident's chain; without one, the system's.
    derived = trail.record(action="test.derived", subject_type="test", subject_id=1, via="cli", incident_id=incident.pk)
    system = trail.record(action="test.system", subject_type="test", subject_id=2, via="cli")
    assert (derived.workspace_id, derived.seq) == (incident.workspace_id, len(chain) + 1)
    assert system.workspace_id is None and system.seq == chains.chain_events(None).count()


def test_the_apps_database_role_can_append_but_never_change_or_cut_audit_rows(incident):
    with connection.cursor() as cur:
        cur.execute("SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")
        assert cur.fetchone() == ("kintsugi_app", False)
    table = AuditEvent._meta.db_table
    trail.record(action="test.appended", subject_type="test", subject_id=1, via="cli", reason="role can append")
    for sql in (f"UPDATE {table} SET reason = 'nothing happened' WHERE seq = 1", f"DELETE FROM {table} WHERE seq = 1",
                f"TRUNCATE {table}", "SET session_replication_role = replica"):  # nor switch the triggers off
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql)
    assert AuditEvent.objects.filter(action="test.appended").count() == 1
    assert AuditEvent.objects.get(incident=incident, seq=1).reason == "poisoned partner page"


def test_verify_audit_holds_on_an_untouched_chain(incident, capsys):
    code, out = _verify(capsys)
    assert code == 0 and "audit chain holds" in out and f"{incident.workspace.name}:" in out


@pytest.mark.parametrize("payload", ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)",
                                     "\t=1", "\r=1", "<script>alert(1)</script>", "&A1 <img src=x>"])
def test_csv_export_neutralises_formulas_and_keeps_the_text(people, payload):
    trail.record(action="test.note", subject_type="test", subject_id=1, via="cli", actor=people.reviewer,
                 reason=payload, data={"note": payload})
    notes = AuditEvent.objects.filter(action="test.note")
    text = export.export_csv(notes)
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["reason"][0] not in "=+-@\t" and "&lt;" not in text
    assert row["reason"] == ("'" + payload if payload[0] in "=+-@\t\r" else payload)
    exported = export.export_json(notes)
    assert "<script" not in exported and json.loads(exported)[0]["reason"] == payload


def test_rejections_and_refusals_are_in_the_chain(incident, people, capsys):
    item = incident.compensation_items.first()
    with pytest.raises(PermissionError):
        reject_item(item=item, actor=people.auditor, reason="not mine to decide", via="admin")
    reject_item(item=item, actor=people.reviewer, reason="duplicate of a manual refund", via="admin")
    assert [e.action for e in AuditEvent.objects.filter(subject_id=str(item.pk)).order_by("seq")] == [
        "item.drafted", "item.refused", "item.rejected"]
    assert _verify(capsys)[0] == 0


def test_an_incident_transition_and_its_audit_event_commit_or_roll_back_together(incident, people):
    from repairs.lifecycle import transition
    from repairs.models import IncidentTransition

    events, transitions = AuditEvent.objects.count(), IncidentTransition.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        transition(incident, "closed", actor=people.lead, via="admin", reason="rolled back")
        assert AuditEvent.objects.filter(incident=incident, action="incident.closed", reason="rolled back").exists()
        raise RuntimeError("the caller's transaction fails after the transition")
    assert (AuditEvent.objects.count(), IncidentTransition.objects.count()) == (events, transitions)
    incident.refresh_from_db()
    assert incident.status == "repaired"
