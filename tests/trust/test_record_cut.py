"""The record of money and incidents cannot be cut without verify_audit saying so.

The application's database role may not TRUNCATE or DELETE from workspaces, incidents, items, ledger,
outbox or tickets; the checkpoint log is chained line to line and anchored in a second file; a
workspace that vanished, or fewer business rows than the latest checkpoint counted, exits 1."""
from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.db import connection, transaction

from core.audit import checkpoints, keys, trail
from compensation.models import AuditEvent, CompensationItem
from provenance.models import LedgerEntry, OutboxEmail, Ticket, Workspace
from repairs.models import Incident
from tests.helpers import behind_the_triggers_back, run_command, signed_chains

pytestmark = pytest.mark.django_db(transaction=True)

PROTECTED = [Workspace, Incident, CompensationItem, LedgerEntry, OutboxEmail, Ticket]


def _as_app(sql: str) -> str:
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute(sql)
            raise RuntimeError("rollback")
    except RuntimeError:
        return "allowed"
    except Exception:
        return "refused"


@pytest.mark.parametrize("model", PROTECTED, ids=lambda m: m._meta.db_table)
def test_the_app_role_may_not_truncate_or_delete_the_record_of_money_and_incidents(model):
    table = model._meta.db_table
    assert _as_app(f"TRUNCATE {table} CASCADE") == "refused"
    assert _as_app(f"DELETE FROM {table}") == "refused"
    assert _as_app(f"SELECT count(*) FROM {table}") == "allowed"  # the probe itself can pass


def test_a_desk_rerun_still_replaces_its_tickets_through_the_owners_function():
    from provenance.recording.services import _replace_tickets

    ws = Workspace.objects.create(name="tickets-rerun")
    other = Workspace.objects.create(name="tickets-other")
    for w in (ws, other):
        Ticket.objects.create(workspace=w, ticket_id="t01", customer_name="A", customer_email="a@x.example",
                              subject="s", body="b", amount_cents=100, tier="standard", payment_reference="ch")
    with transaction.atomic():
        _replace_tickets(ws)
    assert not Ticket.objects.filter(workspace=ws).exists()
    assert Ticket.objects.filter(workspace=other).count() == 1  # one workspace per call, nothing else


def _verify(capsys) -> tuple[int, str]:
    return run_command(capsys, "verify_audit")


def _log_lines() -> list[bytes]:
    return open(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG, "rb").read().splitlines(keepends=True)


def _write_log(lines: list[bytes]) -> None:
    open(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG, "wb").write(b"".join(lines))


def _many_checkpoints(n: int = 6):
    ws = signed_chains()
    for i in range(n):
        trail.record(action="test.more", subject_type="test", subject_id=i, via="cli", workspace=ws.a)
        checkpoints.flush()
    return ws


def test_every_line_is_chained_to_the_one_before_and_carries_the_counts(capsys):
    _many_checkpoints(3)
    lines = [json.loads(line) for line in _log_lines()]
    assert all(line["prev"] for line in lines) and all("counts" in line for line in lines)
    # A workspace's line counts its own rows (a report shows no other team's numbers); the system's all.
    assert {line["counts"]["workspaces"] for line in lines if line["chain"].startswith("workspace:")} == {1}
    assert [line["counts"]["workspaces"] for line in lines if line["chain"] == "system"] == [2]
    code, out = _verify(capsys)
    assert code == 0, out


def test_an_emptied_log_and_a_truncated_table_exit_1(capsys):
    _many_checkpoints()
    _write_log([])
    behind_the_triggers_back(f"TRUNCATE {AuditEvent._meta.db_table}")
    code, out = _verify(capsys)
    assert code == 1 and "newest lines were removed" in out, out


def test_the_newest_three_lines_dropped_with_the_rows_they_sign_exit_1(capsys):
    ws = _many_checkpoints()
    lines = _log_lines()
    kept = [json.loads(line) for line in lines[:-3]]
    top = max(cp["seq"] for cp in kept if cp["chain"] == f"workspace:{ws.a.pk}")
    behind_the_triggers_back(f"DELETE FROM {AuditEvent._meta.db_table} WHERE workspace_id = %s AND seq > %s",
                             [ws.a.pk, top])
    _write_log(lines[:-3])
    code, out = _verify(capsys)
    assert code == 1 and "newest lines were removed" in out, out


def test_an_edited_line_exits_1(capsys):
    _many_checkpoints()
    lines = _log_lines()
    edited = json.loads(lines[2])
    edited["at"] = "2020-01-01T00:00:00.000000+00:00"
    lines[2] = json.dumps(edited, sort_keys=True).encode() + b"\n"
    _write_log(lines)
    code, out = _verify(capsys)
    assert code == 1 and "line 3" in out, out


def test_an_emptied_anchor_exits_1(capsys):
    _many_checkpoints(2)
    open(settings.KINTSUGI_AUDIT_ANCHOR_LOG, "wb").close()
    code, out = _verify(capsys)
    assert code == 1 and "no record of checkpoint log" in out, out


def test_old_unchained_lines_are_read_as_the_first_segment(capsys):
    """A log written before lines were chained: its lines carry no prev and no counts, and still verify."""
    _many_checkpoints(2)
    lines = [json.loads(line) for line in _log_lines()]
    old = []
    for cp in lines:
        cp.pop("prev"), cp.pop("counts")
        unsigned = checkpoints.Checkpoint(**{**cp, "signature": ""})
        cp["signature"] = keys.sign(unsigned.signed_bytes())
        old.append(json.dumps(cp, sort_keys=True).encode() + b"\n")
    _write_log(old)
    open(settings.KINTSUGI_AUDIT_ANCHOR_LOG, "wb").close()
    code, out = _verify(capsys)
    assert code == 0, out
    trail.record(action="test.after", subject_type="test", subject_id=1, via="cli", workspace=None)
    checkpoints.flush()
    assert "prev" in json.loads(_log_lines()[-1])
    code, out = _verify(capsys)
    assert code == 0, out


def test_a_vanished_workspace_exits_1(capsys):
    ws = signed_chains()
    behind_the_triggers_back(f"DELETE FROM {Workspace._meta.db_table} WHERE id = %s", [ws.b.pk])
    code, out = _verify(capsys)
    assert code == 1 and f"workspace:{ws.b.pk}" in out and "gone" in out, out


def test_business_rows_removed_by_the_owner_exit_1(capsys):
    ws = signed_chains()
    spare = Workspace.objects.create(name="audit-spare")
    trail.record(action="test.spare", subject_type="test", subject_id=1, via="cli", workspace=None)
    checkpoints.flush()
    assert json.loads(_log_lines()[-1])["counts"]["workspaces"] == 3
    behind_the_triggers_back(f"DELETE FROM {Workspace._meta.db_table} WHERE id = %s", [spare.pk])
    code, out = _verify(capsys)
    assert code == 1 and "workspaces in all: 2 rows, but the checkpoint" in out, out


def test_an_incident_removed_by_the_owner_exits_1(capsys):
    ws = signed_chains()
    owner = _person("cut-flagger")
    incident = Incident.objects.create(workspace=ws.a, run_number=1, source_id="x/y", reason="r", flagged_by=owner,
                                       flagged_via="cli", status="failed")
    trail.record(action="test.incident", subject_type="incident", subject_id=incident.pk, via="cli", workspace=ws.a)
    checkpoints.flush()
    code, out = _verify(capsys)
    assert code == 0, out
    behind_the_triggers_back(f"DELETE FROM {Incident._meta.db_table} WHERE id = %s", [incident.pk])
    code, out = _verify(capsys)
    assert code == 1 and f"incidents of workspace #{ws.a.pk}: 0 rows" in out, out


def _person(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(name)
