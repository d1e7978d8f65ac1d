"""Incident report download: repairs.reports renders it (JSON, CSV tables in a zip, PDF)."""
from __future__ import annotations

import json

from kintsugi_site.api.errors import ApiError
from repairs.models import Incident
from repairs.services import incident_summary


def render(incident: Incident, fmt: str) -> tuple[bytes, str, str]:
    """(body, content type, file name) of the report of `incident` in `fmt` (json, csv or pdf)."""
    try:
        from repairs.reports import render_report
    except ImportError:
        return _summary_only(incident, fmt)
    return render_report(incident, fmt)


def _summary_only(incident: Incident, fmt: str) -> tuple[bytes, str, str]:
    # Without repairs.reports (an older deployment): the canonical summary and the outcome rows, JSON only.
    if fmt != "json":
        raise ApiError(f"the {fmt} report is not available on this server; use format=json",
                       code="format_unavailable", status_code=406)
    outcomes = list(incident.outcomes.values("action_id", "agent", "ticket", "seq", "status"))
    body = json.dumps(incident_summary(incident) | {"outcomes": outcomes}, indent=2, default=str).encode()
    return body, "application/json", f"incident-{incident.pk}.json"
