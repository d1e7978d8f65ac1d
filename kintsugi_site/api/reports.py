"""Incident report download: repairs.reports renders it (JSON, CSV, PDF) when that module is present."""
from __future__ import annotations

import csv
import io
import json

from kintsugi_site.api.errors import ApiError
from repairs.models import Incident
from repairs.services import incident_summary


def render(incident: Incident, fmt: str) -> tuple[bytes, str, str]:
    """(body, content type, file name) of the report of `incident` in `fmt` (json, csv or pdf)."""
    try:
        from repairs.reports import render_report
    except ImportError:
        return _fallback(incident, fmt)
    return render_report(incident, fmt)


def _fallback(incident: Incident, fmt: str) -> tuple[bytes, str, str]:
    # Until repairs.reports exists: the canonical summary plus one row per action outcome.
    outcomes = list(incident.outcomes.values("action_id", "agent", "ticket", "seq", "status"))
    name = f"incident-{incident.pk}"
    if fmt == "json":
        body = json.dumps(incident_summary(incident) | {"outcomes": outcomes}, indent=2, default=str)
        return body.encode(), "application/json", f"{name}.json"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["action_id", "agent", "ticket", "seq", "status"])
        writer.writeheader()
        writer.writerows(outcomes)
        return out.getvalue().encode(), "text/csv", f"{name}.csv"
    raise ApiError(f"the {fmt} report is not available on this server", code="format_unavailable", status_code=406)
