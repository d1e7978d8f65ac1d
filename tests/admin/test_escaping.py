"""Every admin page shows untrusted text escaped: a poisoned page, a ticket and the model's output that
carry script payloads go through a real flag and repair, then every page of the lead's job is read."""
import json
import re

import pytest
from django.urls import reverse

from compensation.models import CompensationItem
from provenance.models import Source, Ticket
from provenance.recording.services import record_root
from repairs.models import Incident
from kintsugi_site.reports import render_html
from repairs.services import flag_source
from repairs.job import run_repair

PAYLOADS = ["<script>alert('page')</script>", "<img src=x onerror=alert('body')>", "<svg/onload=alert(1)>",
            "<script>alert('name')</script>", "<script>alert('reason')</script>", "<b>t99</b>"]
EVIL_PAGE = (
    "# Policy <script>alert('page')</script>\n\n"
    "## Refunds\n"
    "Change of mind: full refund. <script>alert('page')</script>\n"
)
TICKET_ID = "<b>t99</b>"  # fits the 32 characters of a ticket id, and lands in the picture's labels


@pytest.fixture
def evil_incident(canonical_desk, support_lead):
    ws = canonical_desk
    source = Source.objects.create(workspace=ws, source_id="evil/<svg/onload=alert(1)>",
                                   title="<script>alert('page')</script>", content=EVIL_PAGE)
    Ticket.objects.create(workspace=ws, ticket_id=TICKET_ID, customer_name="<script>alert('name')</script>",
                          customer_email="eve@customers.example", subject="<img src=x onerror=alert('body')>",
                          body="I changed my mind <img src=x onerror=alert('body')>", amount_cents=5000,
                          payment_reference="ch_evil")
    record_root(workspace=ws.name, agent="research", payload={"source": source.source_id})
    ticket = Ticket.objects.get(workspace=ws, ticket_id=TICKET_ID)
    record_root(workspace=ws.name, agent="triage", payload=ticket.as_payload())
    incident = flag_source(workspace=ws, source_id=source.source_id, actor=support_lead,
                           reason="<script>alert('reason')</script>", via=Incident.Via.ADMIN)
    return source, ticket, run_repair(incident_id=incident.pk)


def assert_escaped(body: str, where: str) -> None:
    for payload in PAYLOADS:
        assert payload not in body, f"{where} shows {payload!r} unescaped"


def test_every_admin_page_escapes_page_ticket_and_model_text(lead_client, evil_incident):
    source, ticket, incident = evil_incident
    assert incident.status == "repaired"
    # The payloads really went through: the model copied the page into memory and wrote the customer's
    # name into the email, and the repair invalidated that refund and email.
    assert incident.counts["poisoned"] == 1 and incident.counts["rerun_changed"] >= 1
    invalidated = incident.effects.filter(role="invalidated")
    assert any("alert('name')" in json.dumps(e.details) for e in invalidated)
    items = CompensationItem.objects.filter(incident=incident)
    explain = reverse("admin:repairs_incident_explain", args=[incident.pk])
    triage = incident.outcomes.get(agent="triage")
    email = invalidated.get(kind="email")
    pages = {
        "dashboard": reverse("admin:index"),
        "sources": reverse("admin:provenance_source_changelist"),
        "source": reverse("admin:provenance_source_change", args=[source.pk]),
        "tickets": reverse("admin:provenance_ticket_changelist"),
        "ticket": reverse("admin:provenance_ticket_change", args=[ticket.pk]),
        "incidents": reverse("admin:repairs_incident_changelist"),
        "incident": reverse("admin:repairs_incident_change", args=[incident.pk]),
        "picture": reverse("admin:repairs_incident_graph", args=[incident.pk]),
        "overview": reverse("admin:repairs_incident_graph", args=[incident.pk]) + "?overview=1",
        "explain action": f"{explain}?action={triage.action_id}",
        "explain effect": f"{explain}?effect={email.effect_id}",
        "review queue": reverse("admin:compensation_compensationitem_changelist") + f"?incident__id__exact={incident.pk}",
    }
    pages.update({f"item {i.pk}": reverse("admin:compensation_compensationitem_change", args=[i.pk]) for i in items})
    pages["cases"] = reverse("admin:compensation_compensationitem_cases") + f"?incident={incident.pk}&status=all"
    pages.update({f"case {t}": reverse("admin:compensation_compensationitem_case", args=[incident.pk, t])
                  for t in set(items.values_list("ticket_id", flat=True))})
    shown = {}
    for name, url in pages.items():
        response = lead_client.get(url)
        assert response.status_code == 200, name
        body = response.content.decode()
        assert_escaped(body, name)
        shown[name] = body
    # ... and escaped, not dropped: the untrusted text is on the pages as text.
    assert "&lt;script&gt;alert(&#x27;reason&#x27;)&lt;/script&gt;" in shown["incident"]
    assert "alert(&#x27;page&#x27;)" in shown["explain action"]  # the fact value the model copied from the page
    assert "&lt;b&gt;t99&lt;/b&gt;" in shown["picture"]
    assert "&lt;b&gt;t99&lt;/b&gt;" in shown["cases"]  # the ticket id, slash and all, opens its case
    assert any("&lt;script&gt;alert(&#x27;name&#x27;)" in body for name, body in shown.items() if name.startswith("case "))
    # in the emails the model wrote, and the corrections it drafted
    assert any("&lt;script&gt;alert(&#x27;name&#x27;)" in body for name, body in shown.items() if name.startswith("item"))
    # The flag preview of a second evil source (nothing flagged yet) escapes the page title too.
    other = Source.objects.create(workspace=source.workspace, source_id="evil2/<script>alert('page')</script>",
                                  title="<script>alert('page')</script>", content=EVIL_PAGE)
    preview = lead_client.get(reverse("admin:provenance_source_flag", args=[other.pk])).content.decode()
    assert_escaped(preview, "flag preview")


def test_report_html_and_csv_defuse_untrusted_text(evil_incident):
    from kintsugi_site.reports import build_report, render_report

    _, _, incident = evil_incident
    report = build_report(incident)
    assert_escaped(render_html(report), "report html")
    body, _, _ = render_report(incident, "json")
    text = body.decode()
    assert "<script>" not in text and "\\u003cscript\\u003e" in text
    assert json.loads(text)["incident"]["reason"] == "<script>alert('reason')</script>"


def test_no_template_or_module_of_the_admin_turns_escaping_off():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = [*root.glob("templates/admin/repairs/**/*"), *root.glob("templates/admin/provenance/**/*"),
             *root.glob("templates/reports/**/*"), root / "templates/admin/kintsugi_index.html",
             *[root / "repairs" / f for f in ("admin.py", "views.py", "graph_svg.py", "reports.py", "selectors.py")],
             root / "provenance/admin.py", root / "repairs/workspace_admin.py", root / "compensation/ticket_admin.py", root / "kintsugi_site/admin_site.py"]
    for path in files:
        if path.is_file():
            assert not re.search(r"mark_safe|\|\s*safe\b|autoescape\s+off|safeseq", path.read_text()), path
