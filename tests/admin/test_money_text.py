"""Money reads as money on every page a lead or a reviewer opens on a repaired incident, and in its PDF:
never "cents", never a bare amount in cents beside a currency code, and action numbers as integers."""
import re
import shutil
import subprocess

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from compensation.models import CompensationItem
from core.roles import AUDITOR
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source
from repairs.models import Incident
from kintsugi_site.reports import render_report
from repairs.services import flag_source
from repairs.job import run_repair

# The acceptance check's pattern, plus float-looking action numbers ("#3.0", "seq 3.0").
CENTS = re.compile(r"\bcents?\b|_cents\b|\b\d{4,} (USD|EUR|GBP)\b|\bamount: \d{3,}\b", re.I)
FLOAT_NUMBER = re.compile(r"(?<![\d.,])\d+\.0(?![\d%])")


def page_text(html: str) -> str:
    """What a person reads: the page without its tags (attribute values are not read)."""
    html = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def offences(text: str) -> list[str]:
    return [m.group(0) for m in CENTS.finditer(text)] + [m.group(0) for m in FLOAT_NUMBER.finditer(text)]


def read(client, path, data=None) -> tuple[int, str]:
    response = client.post(path, data) if data is not None else client.get(path)
    return response.status_code, page_text(response.content.decode())


def test_no_page_of_a_repaired_incident_shows_cents_or_float_action_numbers(client, canonical_desk, support_lead,
                                                                           reviewer, make_user):
    source = Source.objects.get(workspace=canonical_desk, source_id=POISONED_PAGE)
    client.force_login(support_lead)
    pages = {"flag preview": read(client, reverse("admin:provenance_source_flag", args=[source.pk]))}
    incident = flag_source(workspace=canonical_desk, source_id=POISONED_PAGE, actor=support_lead,
                           reason="poisoned partner page", via=Incident.Via.CLI)
    incident = run_repair(incident_id=incident.pk)
    changelist = reverse("admin:compensation_compensationitem_changelist")
    items = list(CompensationItem.objects.filter(incident=incident).order_by("pk"))
    explain = reverse("admin:repairs_incident_explain", args=[incident.pk])
    pages.update({
        "dashboard (lead)": read(client, reverse("admin:index")),
        "incident page": read(client, reverse("admin:repairs_incident_change", args=[incident.pk])),
        "close confirmation": read(client, reverse("admin:repairs_incident_close", args=[incident.pk])),
        "explain an effect": read(client, f"{explain}?effect={incident.effects.filter(role='invalidated').first().effect_id}"),
    })
    client.force_login(reviewer)
    pages.update({
        "dashboard (reviewer)": read(client, reverse("admin:index")),
        "review queue": read(client, changelist),
        "incident's queue": read(client, f"{changelist}?incident__id__exact={incident.pk}"),
        "pending queue": read(client, f"{changelist}?incident__id__exact={incident.pk}&status__exact=pending"),
        "bulk approve confirmation": read(client, changelist, {"action": "bulk_approve", "index": 0,
                                                               ACTION_CHECKBOX_NAME: [i.pk for i in items]}),
        "tickets": read(client, reverse("admin:provenance_ticket_changelist")),
        "audit trail": read(client, reverse("admin:compensation_auditevent_changelist")),
        "incident's audit trail": read(client, reverse("admin:compensation_auditevent_changelist")
                                       + f"?incident__id__exact={incident.pk}"),
    })
    cases = reverse("admin:compensation_compensationitem_cases")
    pages.update({"cases": read(client, cases), "incident's cases": read(client, f"{cases}?incident={incident.pk}"),
                  "all cases": read(client, f"{cases}?incident={incident.pk}&status=all"),
                  "verify the audit chain": read(client, reverse("admin:compensation_auditevent_verify"))})
    for item in items:
        pages[f"review page of {item.kind} #{item.pk}"] = read(
            client, reverse("admin:compensation_compensationitem_change", args=[item.pk]))
        pages[f"audit trail of item #{item.pk}"] = read(
            client, reverse("admin:compensation_auditevent_changelist") + f"?item={item.pk}")
    for ticket in sorted({i.ticket_id for i in items}):
        pages[f"case {ticket}"] = read(client, reverse("admin:compensation_compensationitem_case",
                                                       args=[incident.pk, ticket]) + f"?incident={incident.pk}")
        pk = canonical_desk.tickets.get(ticket_id=ticket).pk
        pages[f"ticket page {ticket}"] = read(client, reverse("admin:provenance_ticket_change", args=[pk]))
    client.force_login(make_user("auditor-admin", AUDITOR, member_of=canonical_desk))  # ledger and outbox are theirs
    pages.update({"ledger": read(client, reverse("admin:provenance_ledgerentry_changelist")),
                  "outbox": read(client, reverse("admin:provenance_outboxemail_changelist"))})
    assert {name: code for name, (code, _) in pages.items() if code != 200} == {}
    # The pages do show money, as money: the preview's stake, the queue's total, a reversal's amount.
    assert "$750.00" in pages["flag preview"][1] and "$75.00" in pages["review queue"][1]
    assert "$400.00" in pages["incident's cases"][1] and "$75.00 refunded" in pages["ticket page t05"][1]
    assert len([name for name in pages if name.startswith("case ")]) == 5
    bad = {name: sorted(set(offences(text))) for name, (_, text) in pages.items() if offences(text)}
    assert bad == {}


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="pdftotext (poppler-utils) is not installed")
def test_pdf_report_shows_money_as_money(repaired, tmp_path):
    (tmp_path / "r.pdf").write_bytes(render_report(repaired, "pdf")[0])
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / "r.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "$75.00" in text
    assert offences(text) == []


def test_the_money_check_catches_cents_bare_amounts_and_float_action_numbers():
    # Cents, bare amounts and float action numbers are caught; money as money and whole action numbers pass.
    assert offences("moves 17000 cents USD") and offences("AMOUNT (CENTS) 10000 USD") and offences("amount: 12000")
    assert offences("triage #3.0 re-ran") and offences("seq 12.0")
    assert offences("$75.00 refunded by triage #3; 10 compensation drafts, 87%") == []
