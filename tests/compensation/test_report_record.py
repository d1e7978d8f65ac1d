"""A downloaded incident report carries its chain's signed head and can be checked offline."""
import io
import json
import zipfile

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.roles import REVIEWER, SUPPORT_LEAD
from kintsugi_site.reports import render_report
from repairs.services import close_incident
from tests.helpers import repaired_incident, run_command

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def incident(make_user, eager_celery):
    return repaired_incident(flagger=make_user("lead1", SUPPORT_LEAD))


def _download(incident, tmp_path, name="report.json"):
    body, _, _ = render_report(incident, "json")
    path = tmp_path / name
    path.write_bytes(body)
    return path, json.loads(body)


def test_an_untouched_report_holds_and_an_edited_one_does_not(incident, tmp_path, capsys):
    path, report = _download(incident, tmp_path)
    record = report["record"]
    assert record["state"] == "interim" and record["undecided_items"] == 10
    assert record["head"]["seq"] == record["checkpoint"]["seq"] and record["head"]["hash"] == record["checkpoint"]["hash"]
    code, out = run_command(capsys, "verify_report", str(path))
    assert code == 0 and "report holds" in out and "interim" in out
    edits = {"outcome": lambda r: r["outcome"].update(blast_radius=r["outcome"]["blast_radius"] + 1),
             "state": lambda r: r["record"].update(state="final"),
             "checkpoint": lambda r: r["record"]["checkpoint"].update(seq=r["record"]["checkpoint"]["seq"] - 1)}
    for name, edit in edits.items():
        edited = json.loads(path.read_text())
        edit(edited)
        (tmp_path / f"{name}.json").write_text(json.dumps(edited, indent=2))
        code, out = run_command(capsys, "verify_report", str(tmp_path / f"{name}.json"))
        assert code == 1 and len(out.strip().splitlines()) == 1 and "does not hold" in out, name


def test_a_report_checked_with_another_key_does_not_hold(incident, tmp_path, capsys):
    path, _ = _download(incident, tmp_path)
    other = tmp_path / "other.pub.pem"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    code, out = run_command(capsys, "verify_report", str(path), "--public-key", str(other))
    assert code == 1 and "not by this public key" in out


def test_a_report_is_final_once_every_item_is_decided_and_the_csv_carries_the_checkpoint(incident, make_user, tmp_path, capsys):
    closer = make_user("rev1", REVIEWER)
    incident.workspace.members.add(closer)
    close_incident(incident=incident, actor=closer, reason="done", via="admin")
    path, report = _download(incident, tmp_path)
    assert report["record"]["state"] == "final" and run_command(capsys, "verify_report", str(path))[0] == 0
    body, _, _ = render_report(incident, "csv")
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        record = z.read(f"incident-{incident.pk}/record.csv").decode()
    assert "state,final" in record and report["record"]["checkpoint"]["signature"] in record
