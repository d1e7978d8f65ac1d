import csv
import io
import json

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from compensation import audit
from compensation.models import AuditEvent
from compensation.services import approve_item, reject_item
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


def _behind_the_triggers_back(sql, params=()):
    """What the table owner can do: switch row triggers off for the session and change a row."""
    with connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute(sql, params)
        cur.execute("SET LOCAL session_replication_role = origin")


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
    assert actions.count("item.drafted") == 14 and actions.count("item.cancelled") == 13  # the approved one stays
    approved = next(e for e in events if e.action == "item.approved")
    assert (approved.actor_name, approved.via, approved.reason) == ("reviewer1", "api", "matches the ledger")


def test_raw_sql_update_and_delete_on_audit_rows_fail(incident):
    table = AuditEvent._meta.db_table
    for sql in (f"UPDATE {table} SET reason = 'nothing happened' WHERE seq = 1", f"DELETE FROM {table} WHERE seq = 1"):
        with pytest.raises(DatabaseError, match="pgtrigger: Cannot"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql)
    assert AuditEvent.objects.get(seq=1).reason == "poisoned partner page"


def test_a_restricted_application_role_can_append_but_never_change_audit_rows(incident, people):
    with connection.cursor() as cur:
        cur.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kintsugi_app_test') "
                    "THEN CREATE ROLE kintsugi_app_test NOLOGIN; END IF; END $$")
        cur.execute("GRANT USAGE ON SCHEMA public TO kintsugi_app_test")
    audit.restrict_role("kintsugi_app_test")
    table = AuditEvent._meta.db_table
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET LOCAL ROLE kintsugi_app_test")
        audit.record(action="test.appended", subject_type="test", subject_id=1, via="cli", reason="role can append")
        for sql in (f"UPDATE {table} SET reason = 'x'", f"DELETE FROM {table}", f"TRUNCATE {table}"):
            with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql)
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")  # cannot switch the triggers off either
        with connection.cursor() as cur:
            cur.execute("RESET ROLE")
    assert AuditEvent.objects.filter(action="test.appended").count() == 1


def test_verify_audit_holds_on_an_untouched_chain(incident, capsys):
    code, out = _verify(capsys)
    assert code == 0 and "audit chain holds" in out


def test_verify_audit_catches_an_edit_behind_the_triggers_back(incident, capsys):
    table = AuditEvent._meta.db_table
    _behind_the_triggers_back(f"UPDATE {table} SET reason = 'routine check' WHERE seq = 5")
    code, out = _verify(capsys)
    assert code == 1 and "seq=5" in out and "edited" in out


def test_verify_audit_catches_a_deleted_row(incident, capsys):
    _behind_the_triggers_back(f"DELETE FROM {AuditEvent._meta.db_table} WHERE seq = 7")
    code, out = _verify(capsys)
    assert code == 1 and "seq=8" in out and "missing" in out


def test_verify_audit_catches_reordered_rows(incident, capsys):
    table = AuditEvent._meta.db_table
    # Swap the positions of rows 3 and 4 (the approval-before-the-flag kind of forgery).
    _behind_the_triggers_back(f"UPDATE {table} SET seq = seq + 1000000 WHERE seq IN (3, 4)")
    _behind_the_triggers_back(f"UPDATE {table} SET seq = 4 WHERE seq = 1000003")
    _behind_the_triggers_back(f"UPDATE {table} SET seq = 3 WHERE seq = 1000004")
    code, out = _verify(capsys)
    assert code == 1 and "seq=3" in out and "reordered" in out


def test_verify_audit_catches_rows_swapped_with_their_content(incident):
    # Even with seq and content intact, rows whose ids go back were moved around.
    table = AuditEvent._meta.db_table
    a, b = AuditEvent.objects.filter(seq__in=(3, 4)).order_by("seq").values_list("id", flat=True)
    _behind_the_triggers_back(f"UPDATE {table} SET id = -id WHERE id IN (%s, %s)", [a, b])
    _behind_the_triggers_back(f"UPDATE {table} SET id = %s WHERE id = %s", [b, -a])
    _behind_the_triggers_back(f"UPDATE {table} SET id = %s WHERE id = %s", [a, -b])
    broken, _, _ = audit.verify_chain()
    assert broken is not None and broken.seq == 4 and "reordered" in broken.problem


def test_verify_chain_red_rehashed_edit_still_breaks_the_next_link(incident):
    # A forger who recomputes the edited row's own hash still breaks the following row's prev_hash.
    event = AuditEvent.objects.get(seq=2)
    event.reason = "forged"
    new_hash = audit.row_hash(event)
    _behind_the_triggers_back(f"UPDATE {AuditEvent._meta.db_table} SET reason = %s, hash = %s WHERE seq = 2",
                              ["forged", new_hash])
    broken, _, _ = audit.verify_chain()
    assert broken is not None and broken.seq == 3 and "prev_hash" in broken.problem


@pytest.mark.parametrize("payload", ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)",
                                     "\t=1", "<script>alert(1)</script>"])
def test_csv_export_neutralises_formulas_and_markup(people, payload):
    audit.record(action="test.note", subject_type="test", subject_id=1, via="cli", actor=people.reviewer,
                 reason=payload, data={"note": payload})
    notes = AuditEvent.objects.filter(action="test.note")
    text = audit.export_csv(notes)
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["reason"][0] not in "=+-@\t" and "<script" not in text
    assert row["reason"] == ("'" + payload if payload[0] in "=+-@\t" else payload.replace("<", "&lt;").replace(">", "&gt;"))
    exported = audit.export_json(notes)
    assert "<script" not in exported and json.loads(exported)[0]["reason"] == payload


def test_rejections_and_refusals_are_in_the_chain(incident, people, capsys):
    item = incident.compensation_items.first()
    with pytest.raises(PermissionError):
        reject_item(item=item, actor=people.auditor, reason="not mine to decide", via="admin")
    reject_item(item=item, actor=people.reviewer, reason="duplicate of a manual refund", via="admin")
    assert [e.action for e in AuditEvent.objects.filter(subject_id=str(item.pk)).order_by("seq")] == [
        "item.drafted", "item.refused", "item.rejected"]
    assert _verify(capsys)[0] == 0
