"""Per-workspace audit chains against what the database owner can do behind the triggers' back, and
against the signed checkpoints kept outside the database."""
import json
import os
from html import unescape
import stat

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from core.audit import chains, checkpoints, keys, trail, verification
from compensation.models import AuditEvent
from tests.helpers import behind_the_triggers_back, owner_connection, run_command, signed_chains, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TABLE = AuditEvent._meta.db_table


@pytest.fixture
def ws():
    return signed_chains()


def _row_json(workspace, seq) -> str:
    with owner_connection() as db:
        return db.execute(f"SELECT row_to_json(a)::text FROM {TABLE} a WHERE workspace_id = %s AND seq = %s",
                          [workspace.pk, seq]).fetchone()[0]


def test_every_chain_holds_and_names_its_checkpoint(ws, capsys):
    code, out = run_command(capsys, "verify_audit")
    assert code == 0
    assert "audit chain holds: audit-a: 10 rows" in out and "checkpoint seq 10" in out
    assert "audit chain holds: audit-b: 6 rows" in out and "audit chain holds: system: 3 rows" in out
    code, out = run_command(capsys, "verify_audit", "--workspace", "audit-b", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["holds"] and [c["workspace"] for c in doc["chains"]] == ["audit-b"]
    assert doc["chains"][0]["checkpoint"]["seq"] == 6 and doc["chains"][0]["checkpoint"]["signed"] is True


def test_a_commit_is_signed_within_the_delay_into_private_files(ws, settings):
    trail.record(action="test.late", subject_type="test", subject_id=1, via="cli", workspace=ws.a)
    # No explicit flush: the timer thread signs it.
    wait_for(lambda: checkpoints.latest().get(f"workspace:{ws.a.pk}").seq == 11, timeout=5, interval=0.1)
    assert stat.S_IMODE(os.stat(settings.KINTSUGI_AUDIT_CHECKPOINT_LOG).st_mode) == 0o600
    key = settings.KINTSUGI_AUDIT_SIGNING_KEY
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode) == 0o700
    assert keys.public_key_path().exists()


def test_deleting_the_newest_row_is_caught_and_putting_it_back_holds(ws, capsys):
    row = _row_json(ws.a, 10)
    behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE workspace_id = %s AND seq = 10", [ws.a.pk])
    code, out = run_command(capsys, "verify_audit")
    assert code == 1 and "chain=audit-a seq=10" in out and "deleted" in out
    assert "audit chain holds: audit-b" in out  # the other chains are named as holding
    behind_the_triggers_back(f"INSERT INTO {TABLE} SELECT * FROM json_populate_record(NULL::{TABLE}, %s::json)", [row])
    assert run_command(capsys, "verify_audit")[0] == 0


def test_deleting_a_middle_row_is_caught(ws, capsys):
    behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE workspace_id = %s AND seq = 4", [ws.a.pk])
    code, out = run_command(capsys, "verify_audit")
    assert code == 1 and "chain=audit-a seq=5" in out and "missing" in out


def test_truncating_the_table_is_caught_in_every_chain(ws, capsys):
    behind_the_triggers_back(f"TRUNCATE {TABLE}")
    code, out = run_command(capsys, "verify_audit")
    assert code == 1 and "truncated" in out
    for name in ("system", "audit-a", "audit-b"):
        assert f"chain={name} seq=1" in out


def test_an_edit_is_caught(ws, capsys):
    behind_the_triggers_back(f"UPDATE {TABLE} SET reason = 'routine check' WHERE workspace_id = %s AND seq = 5", [ws.a.pk])
    code, out = run_command(capsys, "verify_audit")
    assert code == 1 and "chain=audit-a seq=5" in out and "edited" in out


def test_reordered_rows_are_caught(ws):
    # Swap the positions of rows 3 and 4 (the approval-before-the-flag kind of forgery).
    for sql in ("UPDATE {t} SET seq = seq + 1000000 WHERE workspace_id = %s AND seq IN (3, 4)",
                "UPDATE {t} SET seq = 4 WHERE workspace_id = %s AND seq = 1000003",
                "UPDATE {t} SET seq = 3 WHERE workspace_id = %s AND seq = 1000004"):
        behind_the_triggers_back(sql.format(t=TABLE), [ws.a.pk])
    status = verification.verify_chain(workspace=ws.a)
    assert status.broken.seq == 3 and "reordered" in status.broken.problem


def test_rows_swapped_with_their_content_are_caught(ws):
    # Even with seq and content intact, rows whose ids go back were moved around.
    a, b = chains.chain_events(ws.a).filter(seq__in=(3, 4)).order_by("seq").values_list("id", flat=True)
    behind_the_triggers_back(f"UPDATE {TABLE} SET id = -id WHERE id IN (%s, %s)", [a, b])
    behind_the_triggers_back(f"UPDATE {TABLE} SET id = %s WHERE id = %s", [b, -a])
    behind_the_triggers_back(f"UPDATE {TABLE} SET id = %s WHERE id = %s", [a, -b])
    status = verification.verify_chain(workspace=ws.a)
    assert status.broken.seq == 4 and "reordered" in status.broken.problem


def test_a_rehashed_edit_still_breaks_the_next_link(ws):
    event = chains.chain_events(ws.a).get(seq=2)
    event.reason = "forged"
    behind_the_triggers_back(f"UPDATE {TABLE} SET reason = %s, hash = %s WHERE id = %s", ["forged", chains.row_hash(event), event.pk])
    status = verification.verify_chain(workspace=ws.a)
    assert status.broken.seq == 3 and "prev_hash" in status.broken.problem


def test_a_chain_rewritten_consistently_is_caught_by_its_checkpoint(ws, capsys):
    # A forger who re-hashes every row from the edit on leaves a chain that links up: only the
    # signed checkpoint, outside the database, shows it.
    rows = list(chains.chain_events(ws.a).order_by("seq"))
    rows[1].reason, prev = "forged", rows[0].hash
    for event in rows[1:]:
        event.prev_hash = prev
        event.hash = prev = chains.row_hash(event)
        behind_the_triggers_back(f"UPDATE {TABLE} SET reason = %s, prev_hash = %s, hash = %s WHERE id = %s",
                                 [event.reason, event.prev_hash, event.hash, event.pk])
    code, out = run_command(capsys, "verify_audit", "--workspace", "audit-a")
    assert code == 1 and "chain=audit-a seq=10" in out and "rewritten" in out


def test_an_edited_checkpoint_log_is_caught(ws, settings, capsys):
    path = settings.KINTSUGI_AUDIT_CHECKPOINT_LOG
    lines = open(path).read().splitlines()
    forged = [json.dumps({**json.loads(line), "seq": 9}) if json.loads(line)["chain"] == f"workspace:{ws.a.pk}" else line
              for line in lines]
    open(path, "w").write("\n".join(forged) + "\n")
    code, out = run_command(capsys, "verify_audit")
    assert code == 1 and "chain=audit-a seq=9" in out and "signature" in out


def test_a_cut_chain_is_never_signed_over(ws):
    behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE workspace_id = %s AND seq = 10", [ws.a.pk])
    trail.record(action="test.after_cut", subject_type="test", subject_id=1, via="cli", workspace=ws.a)  # seq 10 again
    checkpoints.flush()
    cp = checkpoints.latest()[f"workspace:{ws.a.pk}"]
    assert cp.seq == 10 and cp.hash != chains.chain_events(ws.a).get(seq=10).hash
    assert "rewritten" in verification.verify_chain(workspace=ws.a).broken.problem


def test_the_triggers_refuse_the_owner_too_unless_switched_off(ws):
    with owner_connection() as db:
        for sql, message in ((f"UPDATE {TABLE} SET reason = 'x'", "Cannot update"),
                             (f"DELETE FROM {TABLE}", "Cannot update or delete"), (f"TRUNCATE {TABLE}", "Cannot truncate")):
            with pytest.raises(psycopg.errors.RaiseException, match=message):
                db.execute(sql)
    assert AuditEvent.objects.count() == 19


def test_the_admin_shows_a_broken_chain_and_its_checkpoint(ws, client, django_user_model):
    admin_user = django_user_model.objects.create_superuser("root", password="pass-1234-kintsugi")
    behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE workspace_id = %s AND seq = 10", [ws.a.pk])
    client.force_login(admin_user)
    page = client.get(reverse("admin:compensation_auditevent_changelist")).content.decode()
    a_row = page[page.index(f'data-chain="workspace:{ws.a.pk}"'):]
    a_row = a_row[:a_row.index("</tr>")]
    assert "broken at seq 10" in a_row and "seq 10 at" in a_row and "signed" in a_row
    b_row = page[page.index(f'data-chain="workspace:{ws.b.pk}"'):]
    assert "verified" in b_row[:b_row.index("</tr>")]


def test_a_missing_signing_key_is_generated_unless_required(settings, tmp_path):
    settings.KINTSUGI_AUDIT_SIGNING_KEY = str(tmp_path / "keys" / "signing-key.pem")
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True
    with pytest.raises(ImproperlyConfigured, match="never generated"):
        keys.signing_key()
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = False
    keys.signing_key()
    assert stat.S_IMODE(os.stat(tmp_path / "keys" / "signing-key.pem").st_mode) == 0o600
    assert (tmp_path / "keys" / "signing-key.pub.pem").exists()


def _verify_page(client, query=""):
    response = client.get(reverse("admin:compensation_auditevent_verify") + query)
    if response.status_code != 200:
        return response.status_code, None, None
    html = response.content.decode()

    def pre(element_id):
        if f'id="{element_id}"' not in html:
            return []
        start = html.index(">", html.index(f'id="{element_id}"')) + 1
        return [unescape(line) for line in html[start:html.index("</pre>", start)].splitlines() if line]
    return 200, pre("verify-stdout"), pre("verify-stderr")


def test_the_verify_page_prints_what_the_command_prints_and_breaks_with_it(ws, client, django_user_model, capsys):
    admin_user = django_user_model.objects.create_superuser("verifier", password="pass-1234-kintsugi")
    client.force_login(admin_user)
    checkpoints.flush()  # so the page and the command see the same signed heads
    code, out, err = _verify_page(client)
    cmd_code, cmd_out = run_command(capsys, "verify_audit")
    assert code == 200 and cmd_code == 0 and err == []
    assert out == cmd_out.splitlines()  # a superuser's page covers every chain, line for line
    # A row edited behind the triggers' back breaks the page exactly as it breaks the command.
    behind_the_triggers_back(f"UPDATE {TABLE} SET reason = 'rewritten' WHERE workspace_id = %s AND seq = 3", [ws.a.pk])
    code, out, err = _verify_page(client)
    cmd_code, cmd_out = run_command(capsys, "verify_audit")
    assert cmd_code == 1 and 'data-holds="0"' in client.get(reverse("admin:compensation_auditevent_verify")).content.decode()
    assert err == [str(verification.verify_chain(workspace=ws.a).broken)] and "seq=3" in err[0]
    assert sorted(out + err) == sorted(cmd_out.splitlines())


def test_a_member_verifies_only_the_chains_of_their_workspaces(ws, client, django_user_model):
    from django.contrib.auth.models import Group

    from core.roles import AUDITOR, ensure_roles

    ensure_roles()
    auditor = django_user_model.objects.create_user("chain-auditor", password="pass-1234-kintsugi", is_staff=True)
    auditor.groups.add(Group.objects.get(name=AUDITOR))
    ws.a.members.add(auditor)
    client.force_login(auditor)
    code, out, err = _verify_page(client)
    assert code == 200 and len(out) == 1 and out[0].startswith("audit chain holds: audit-a: 10 rows")
    for other in (f"?workspace={ws.b.pk}", "?workspace=system", "?workspace=nope"):
        assert _verify_page(client, other)[0] == 404, other
    assert _verify_page(client, f"?workspace={ws.a.pk}")[1] == out
