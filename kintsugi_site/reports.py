"""The incident report: one dict (build_report) rendered as JSON, a zip of CSV tables, or a PDF.

The PDF is WeasyPrint over `reports/incident.html`, which includes the same section template
(`reports/_incident_sections.html`) as the admin's incident page, so the page and the PDF can't drift.
The JSON carries everything the other two show (and the rows behind them), so the report can be rebuilt
from it. Text in the report (decisions, drafted emails, reasons) is untrusted: the templates escape it,
the CSV cells hold the text itself with formulas defused for spreadsheets (core.audit.csv_cell: no HTML
entities, which would corrupt the data), and the JSON escapes <, > and &
as \\u sequences.
"""
from __future__ import annotations

import base64
import csv
import io
import json
import zipfile
from datetime import datetime, timezone

from django.template.loader import render_to_string

from core.audit.export import csv_cell
from provenance.progress import ProgressFn, noop
from provenance.recording.selectors import whole_seq
from compensation.review import review_numbers
from compensation.review import selectors as items
from kintsugi_site import report_record
from repairs import radius_picture, selectors, ticket_story
from repairs.models import ActionOutcome, Incident

FORMATS = ("json", "csv", "pdf")
CONTENT_TYPES = {"json": "application/json", "csv": "application/zip", "pdf": "application/pdf"}
# Rows per table in the PDF (and the HTML it is made from). WeasyPrint took 150 s for a 3,000-ticket
# incident with 2,000 rows per table; a PDF is read by people, the JSON and CSV carry every row.
PDF_ROW_LIMIT = 300
CHUNK = 2000


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _outcomes(incident: Incident, progress: ProgressFn) -> list[ActionOutcome]:
    total = incident.blast_radius or 0
    rows = []
    for o in ActionOutcome.objects.filter(incident=incident).order_by("ticket", "seq").iterator(chunk_size=CHUNK):
        rows.append(o)
        if len(rows) % CHUNK == 0:
            progress(len(rows), max(total, len(rows)))
    return rows


def build_report(incident: Incident, *, progress: ProgressFn = noop) -> dict:
    """Everything the incident report shows, as plain JSON-able data."""
    incident = selectors.incident_for_page(incident.pk)
    outcomes = _outcomes(incident, progress)
    actions = [{"action_id": o.action_id, "agent": o.agent, "ticket": o.ticket, "seq": whole_seq(o.seq), "parent_id": o.parent_id,
                "status": o.status, "before": o.before, "after": o.after} for o in sorted(outcomes, key=lambda o: o.seq)]
    effects = [selectors.effect_dict(e) for e in incident.effects.order_by("ticket", "kind", "effect_id")]
    changes = [c for c in selectors.by_ticket(outcomes) if c.ticket]
    stories = ticket_story.stories(incident=incident, changes=changes)  # before → after in words
    report = {
        "report": "kintsugi incident report",
        "version": 1,
        "generated_at": datetime.now(timezone.utc).isoformat(),
        "incident": {
            "id": incident.pk, "workspace": incident.workspace.name, "run_number": incident.run_number,
            "source": incident.source_id, "reason": incident.reason, "status": incident.status,
            "status_label": selectors.status_label(incident), "currency": incident.currency,
            "flagged_by": incident.flagged_by.get_username(), "flagged_via": incident.flagged_via,
            "created_at": _iso(incident.created_at), "started_at": _iso(incident.started_at),
            "finished_at": _iso(incident.finished_at), "attempts": incident.attempts, "error": incident.error or None,
        },
        "outcome": {
            "blast_radius": incident.blast_radius,
            "counts": {k: (incident.counts or {}).get(k, 0) for k in selectors.STATUSES},
            "effects_invalidated": incident.effects_invalidated,
            "effects_invalidated_by_kind": incident.invalidated_by_kind or {},
            "compensations": incident.compensations,
            "tickets_untouched": incident.tickets_untouched,
            "tickets_touched": incident.tickets_touched,
            "table": [{k: r.get(k) for k in ("key", "label", "value", "detail")} for r in selectors.outcome_rows(incident)],
        },
        "actions": actions,
        "tickets": [{"ticket": t.ticket, "before": t.chain(after=False, raw=True), "after": t.chain(after=True, raw=True),
                     "statuses": t.statuses, "changed": t.changed, "story": stories[t.ticket].as_dict()}
                    for t in changes],
        "effects": effects,
        "compensation": items.compensation_items(incident=incident),
        "item_counts": {**(counts := items.item_counts(incident=incident)).as_dict(), "sentence": counts.sentence},
        "review": {**(found := review_numbers.review(incident=incident)).as_dict(),
                   "status_text": review_numbers.status_text(incident, found)},
        "verification": incident.verification,
        "transitions": [{**t, "at": _iso(t["at"])} for t in selectors.transition_rows(incident=incident)],
        "record": report_record.record_section(incident),
    }
    progress(len(actions), max(len(actions), 1))
    return report


# --- JSON ---------------------------------------------------------------------------------------------------
def _json(report: dict) -> bytes:
    # Signed as the plain JSON data a download parses back to (report_record).
    report = report_record.sign_report(json.loads(json.dumps(report, default=str)))
    text = json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False)
    # Inert if a browser ever renders it: the same data, with markup characters as \u escapes.
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e").encode()


# --- CSV (a zip of tables) --------------------------------------------------------------------------------
def _table(columns: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return out.getvalue()


def _chain(steps: list[dict], currency: str | None) -> str:
    return " → ".join(f"{s['agent']} #{s['action']} ({selectors.describe(s['decision'], currency=currency)})"
                      for s in steps)


def _record_rows(record: dict) -> list[dict]:
    cp, head = record.get("checkpoint") or {}, record.get("head") or {}
    return [{"field": k, "value": v} for k, v in (
        ("state", record["state"]), ("undecided_items", record["undecided_items"]), ("chain", record["chain"]),
        ("workspace", record["workspace"]), ("head_seq", head.get("seq")), ("head_hash", head.get("hash")),
        ("checkpoint_seq", cp.get("seq")), ("checkpoint_hash", cp.get("hash")), ("checkpoint_at", cp.get("at")),
        ("checkpoint_database", cp.get("database")), ("checkpoint_key", cp.get("key")),
        ("checkpoint_signature", cp.get("signature")))]


DELIVERY_COLUMNS = ["delivery_state", "delivery_connector", "delivery_reference", "delivery_attempts",
                    "delivery_failure_reason"]


def _delivery_cells(item: dict) -> dict:
    d = item.get("delivery") or {}
    return {"delivery_state": d.get("state"), "delivery_connector": d.get("connector"),
            "delivery_reference": d.get("reference"), "delivery_attempts": d.get("attempts"),
            "delivery_failure_reason": d.get("failure_reason")}


def _csv_zip(report: dict) -> bytes:
    inc, out = report["incident"], report["outcome"]
    currency, counts = inc.get("currency"), report["item_counts"]
    tables = {
        "incident.csv": _table(["field", "value"], [{"field": k, "value": v} for k, v in inc.items()]),
        "outcome.csv": _table(["key", "label", "value", "detail"], out["table"]),
        "actions.csv": _table(["action_id", "agent", "ticket", "seq", "parent_id", "status", "before", "after"],
                              report["actions"]),
        "tickets.csv": _table(["ticket", "changed", "statuses", "in_words", "before", "after"], [
            {**t, "statuses": " ".join(t["statuses"]), "in_words": t["story"]["text"],
             "before": _chain(t["before"], currency), "after": _chain(t["after"], currency)}
            for t in report["tickets"]]),
        "effects.csv": _table(["effect_id", "action_id", "role", "kind", "ticket", "amount", "amount_cents", "currency",
                               "details"], report["effects"]),
        # One row per kind and status, then the totals the incident page prints (compensation.review.selectors.ItemCounts).
        "items.csv": _table(["kind", "status", "items"], [
            {"kind": k, "status": s, "items": n} for k, row in counts["by_kind"].items() for s, n in row.items()] + [
            {"kind": name, "status": "all", "items": counts[name]}
            for name in ("compensation_drafts", "held_replacements", "total")]),
        "compensation.csv": _table(["id", "kind", "ticket", "status", "amount", "amount_cents", "currency", "to", "subject",
                                    "body", "valid", "decided_by", "decided_at", "decision_reason", "executed_at",
                                    *DELIVERY_COLUMNS], [{**c, **_delivery_cells(c)} for c in report["compensation"]]),
        "compensation_audit.csv": _table(["item", "seq", "at", "actor", "via", "action", "from_status", "to_status",
                                          "reason"],
                                         [{"item": c["id"], **ev} for c in report["compensation"] for ev in c["history"]]),
        "verification.csv": _table(["table", "side", "row"], (report["verification"] or {}).get("rows", [])),
        "transitions.csv": _table(["at", "from", "to", "actor", "via", "reason"], report["transitions"]),
        "record.csv": _table(["field", "value"], _record_rows(report["record"])),
    }
    if report["verification"] is not None:
        tables["verification.csv"] = _table(["table", "side", "row"], [
            {"table": "summary", "side": k, "row": report["verification"].get(k)} for k in ("facts", "decisions", "effects")
        ] + report["verification"].get("rows", []))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in tables.items():
            z.writestr(f"incident-{inc['id']}/{name}", text)
    return buf.getvalue()


# --- HTML / PDF ---------------------------------------------------------------------------------------------
def report_context(report: dict) -> dict:
    """The section template's context from a report dict (the page builds the same names from selectors)."""
    def cap(rows):
        return rows[:PDF_ROW_LIMIT], max(0, len(rows) - PDF_ROW_LIMIT)

    def describe(decision) -> str:
        return selectors.describe(decision, currency=report["incident"].get("currency"))

    tickets, tickets_more = cap([{
        "ticket": t["ticket"], "changed": t["changed"], "statuses": t["statuses"],
        "before": [{**s, "decision": describe(s["decision"])} for s in t["before"]],
        "after": [{**s, "decision": describe(s["decision"])} for s in t["after"]],
    } for t in report["tickets"]])
    actions, actions_more = cap([{**a, "status_label": selectors.STATUS_LABELS.get(a["status"], a["status"]),
                                  "before": describe(a["before"]), "after": describe(a["after"])}
                                 for a in report["actions"]])
    verification = selectors.verification_view(report["verification"], limit=PDF_ROW_LIMIT)
    effects, effects_more = cap([e for e in report["effects"] if e["role"] == "invalidated"])
    return {
        "r": report, "outcome_rows": report["outcome"]["table"], "verification": verification,
        "ticket_rows": tickets, "tickets_more": tickets_more,
        "ticket_stories": {t["ticket"]: t["story"] for t in report["tickets"] if t.get("story")},
        "action_rows": actions, "actions_more": actions_more,
        "invalidated_effects": effects, "effects_more": effects_more,
        "compensation": report["compensation"][:PDF_ROW_LIMIT],
        "compensation_more": max(0, len(report["compensation"]) - PDF_ROW_LIMIT),
        "transitions": report["transitions"],
        "status_keys": selectors.STATUSES,
        "item_counts": report.get("item_counts"),
        "review": report.get("review"),
    }


def _when(iso: str | None) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC") if iso else "—"


def _picture(incident: Incident) -> str:
    """The blast-radius picture as a data: URI for the PDF: the grouped overview for big radii, else
    the first page of the detail (the same SVG the admin serves)."""
    from repairs import graph_svg

    if incident.blast_radius is None:
        return ""
    if incident.blast_radius > radius_picture.DETAIL_LIMIT:
        picture = graph_svg.layout_overview(radius_picture.graph_overview(incident=incident))
    else:
        picture = graph_svg.layout_page(radius_picture.graph_page(incident=incident, per_page=50))
    svg = graph_svg.render_svg(picture, title=f"Blast radius of {incident.source_id}")
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def render_html(report: dict, *, picture: str = "") -> str:
    context = report_context(report)
    inc = report["incident"]
    context["when"] = {k: _when(inc[k]) for k in ("created_at", "started_at", "finished_at")}
    context["when"]["generated_at"] = _when(report["generated_at"])
    context["transitions"] = [{**t, "at": _when(t["at"])} for t in report["transitions"]]
    context["compensation"] = [{**c, "history": [{**ev, "at": _when(ev["at"])} for ev in c["history"]]}
                               for c in context["compensation"]]
    context["picture"], context["picture_template"] = picture, "reports/_picture.html"
    return render_to_string("reports/incident.html", context)


def _pdf(report: dict, incident: Incident) -> bytes:
    from weasyprint import HTML
    from weasyprint.urls import URLFetcher

    # The report embeds its picture as a data: URI and needs nothing else: never a file, never the network.
    fetcher = URLFetcher(allowed_protocols={"data"})
    return HTML(string=render_html(report, picture=_picture(incident)), url_fetcher=fetcher).write_pdf()


def render_report(incident: Incident, fmt: str, *, progress: ProgressFn = noop) -> tuple[bytes, str, str]:
    """(body, content type, file name) of the report of `incident` in json, csv (a zip of tables) or pdf."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    report = build_report(incident, progress=progress)
    body = _pdf(report, incident) if fmt == "pdf" else {"json": _json, "csv": _csv_zip}[fmt](report)
    ext = "zip" if fmt == "csv" else fmt
    return body, CONTENT_TYPES[fmt], f"incident-{incident.pk}.{ext}"
