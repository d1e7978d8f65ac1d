"""The incident report: JSON complete enough to rebuild it, CSV as a zip of tables, PDF with the source
as text, from the admin and from `manage.py export_incident`."""
import csv
import io
import json
import shutil
import subprocess
import zipfile

import pytest
from django.core.management import call_command
from django.urls import reverse

from provenance.desk.scenario import POISONED_PAGE
from repairs.models import Incident
from kintsugi_site.reports import build_report, render_html, render_report


def test_json_report_carries_everything_the_report_shows(repaired):
    body, content_type, filename = render_report(repaired, "json")
    assert (content_type, filename) == ("application/json", f"incident-{repaired.pk}.json")
    report = json.loads(body)
    assert report["incident"]["source"] == POISONED_PAGE and report["incident"]["status"] == "repaired"
    out = report["outcome"]
    assert out["blast_radius"] == 25 and out["effects_invalidated"] == 10 and out["tickets_untouched"] == 16
    assert out["counts"] == {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8,
                             "new": 4}
    assert out["effects_invalidated_by_kind"] == {"refund": 5, "email": 5}
    assert len(report["actions"]) == 29 and len(report["tickets"]) == 8
    assert sum(e["role"] == "invalidated" for e in report["effects"]) == 10
    assert len(report["compensation"]) >= 10
    assert all(item["history"] and item["history"][0]["action"] for item in report["compensation"])
    assert {k: report["verification"][k] for k in ("facts", "decisions", "effects")} == {
        "facts": 0, "decisions": 0, "effects": 0}
    assert [t["to"] for t in report["transitions"]] == ["open", "repairing", "repaired"]
    # The HTML (and so the PDF) can be rendered from the JSON alone.
    assert POISONED_PAGE in render_html(json.loads(body))


def test_csv_report_is_a_zip_of_tables(repaired):
    body, content_type, filename = render_report(repaired, "csv")
    assert content_type == "application/zip" and filename.endswith(".zip")
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        names = {n.split("/")[-1] for n in z.namelist()}
        assert names >= {"incident.csv", "outcome.csv", "actions.csv", "tickets.csv", "effects.csv",
                         "compensation.csv", "compensation_audit.csv", "verification.csv", "transitions.csv",
                         "record.csv"}
        actions = z.read(f"incident-{repaired.pk}/actions.csv").decode().splitlines()
        assert len(actions) == 1 + 29
        outcome = z.read(f"incident-{repaired.pk}/outcome.csv").decode()
        assert "blast_radius,Blast radius,25," in outcome


def test_csv_report_holds_the_text_itself_with_formulas_defused(repaired):
    def incident_csv(reason: str) -> tuple[dict, str]:
        Incident.objects.filter(pk=repaired.pk).update(reason=reason)
        repaired.refresh_from_db()
        body, _, _ = render_report(repaired, "csv")
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            rows = dict(csv.reader(io.StringIO(z.read(f"incident-{repaired.pk}/incident.csv").decode())))
            return rows, "".join(z.read(n).decode() for n in z.namelist())

    reason = "&A1 <img src=x> \"quoted\", and a comma"
    rows, text = incident_csv(reason)
    assert rows["reason"] == reason and "&amp;" not in text and "&lt;" not in text
    for formula in ("=HYPERLINK(\"http://evil.example\",\"x\")", "+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1"):
        assert incident_csv(formula)[0]["reason"] == "'" + formula


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="pdftotext (poppler-utils) is not installed")
def test_pdf_names_the_flagged_source_and_the_numbers(lead_client, repaired, tmp_path):
    response = lead_client.get(reverse("admin:repairs_incident_report", args=[repaired.pk, "pdf"]))
    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"] == f'attachment; filename="incident-{repaired.pk}.pdf"'
    assert response.content.startswith(b"%PDF")
    (tmp_path / "r.pdf").write_bytes(response.content)
    text = " ".join(subprocess.run(["pdftotext", str(tmp_path / "r.pdf"), "-"], capture_output=True, text=True,
                                   check=True).stdout.split())  # table cells wrap: compare words
    assert POISONED_PAGE in text
    assert "Blast radius" in text and "10 (5 refunds, 5 emails)" in text and "16 (of 24)" in text


def test_export_incident_command_writes_each_format(repaired, tmp_path, capsys):
    for fmt in ("json", "csv", "pdf"):
        out = tmp_path / f"report.{fmt}"
        call_command("export_incident", str(repaired.pk), "--format", fmt, "--output", str(out))
        assert out.stat().st_size > 1000
    assert json.loads((tmp_path / "report.json").read_text())["incident"]["id"] == repaired.pk
    assert (tmp_path / "report.pdf").read_bytes().startswith(b"%PDF")
    assert zipfile.is_zipfile(tmp_path / "report.csv")
    assert f"incident #{repaired.pk} report" in capsys.readouterr().err  # progress on the command line


def test_export_incident_unknown_id_exits_2(db, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        call_command("export_incident", "999999", "--format", "json", "--output", str(tmp_path / "x.json"))
    assert exit_.value.code == 2


def test_report_build_reports_progress(repaired):
    calls = []
    build_report(repaired, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] == 29


def test_report_of_an_incident_still_waiting_for_its_repair(canonical_desk, support_lead):
    from repairs.models import Incident
    from repairs.services import flag_source

    incident = flag_source(workspace=canonical_desk, source_id=POISONED_PAGE, actor=support_lead, reason="queued",
                           via=Incident.Via.ADMIN)
    report = json.loads(render_report(incident, "json")[0])
    assert report["incident"]["status"] == "open" and report["outcome"]["blast_radius"] is None
    assert report["actions"] == [] and report["verification"] is None
    assert render_report(incident, "pdf")[0].startswith(b"%PDF")
    assert zipfile.is_zipfile(io.BytesIO(render_report(incident, "csv")[0]))
