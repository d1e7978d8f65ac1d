"""The glossary: the pages a support lead, a reviewer and an auditor read first, and the PDF's HTML, speak
in plain words: no "(s)", no internal function paths, no raw audit action names, no internal ids such
as "desk 7e208d0340cf9ccb", and counts of a thousand or more with separators. The scanner's own red
case keeps it able to fail."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from compensation.delivery.approval import undo
from compensation.review.services import approve_item
from core.vocabulary import AuditAction
from core.wording import counted, event_words, past, plural
from kintsugi_site.reports import build_report, render_html

pytestmark = pytest.mark.django_db
_PATH = re.compile(r"\b(?:provenance|repairs|compensation|core|kintsugi_site)(?:\.[a-z_]+){2,}\b")
_ACTIONS = {a.value for a in AuditAction if "." in a.value}
_COUNT = re.compile(r"(?<![\d,.#:/-])\d{4,}(?= (?:cases|items|actions|tickets|rows|events|emails|refunds|effects)\b)")


class _Text(HTMLParser):
    """The words a person reads: text nodes outside <script> and <style>, and button labels."""

    def __init__(self):
        super().__init__()
        self.parts, self._skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        attrs = dict(attrs)
        if tag == "input" and attrs.get("type") in ("submit", "button") and attrs.get("value"):
            self.parts.append(attrs["value"])

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def jargon(html: str) -> list[str]:
    """What in the readable text of `html` is not plain words."""
    parser = _Text()
    parser.feed(html)
    text = " ".join(parser.parts)
    found = [m.group(0) for m in re.finditer(r"\w\(s\)", text)]
    found += _PATH.findall(text)
    found += [w for w in re.findall(r"\b[a-z_]+\.[a-z_]+\b", text) if w in _ACTIONS]
    found += re.findall(r"\bdesk [0-9a-f]{12,}\b", text)
    found += _COUNT.findall(text)
    return found


def test_the_scanner_finds_each_kind_of_jargon():
    bad = ('<p>3 case(s) left. Set by a lead (provenance.access.trust.set_source_trust). item.decision_undone '
           'desk 7e208d0340cf9ccb · 1516 cases</p><script>var x = "item(s)";</script>')
    assert jargon(bad) == ["e(s)", "provenance.access.trust.set_source_trust", "item.decision_undone", "desk 7e208d0340cf9ccb",
                           "1516"]
    assert jargon("<p>1 case left · 1,516 cases · ticket t0021 · on 2026-12-04 · Item: decision undone</p>") == []


def test_counts_and_events_in_plain_words():
    assert counted(1, "case") == "1 case" and counted(1516, "case") == "1,516 cases"
    assert counted(2, "delivery") == "2 deliveries" and plural("was", 3) == "were"
    assert past("reject") == "rejected" and past("approve") == "approved"
    assert event_words("item.decision_undone") == "Item: decision undone"


def _pages(canonical, client):
    incident, people = canonical.incident, canonical.people
    # Events a person should read in words: an approval, taken back.
    item = incident.compensation_items.filter(kind="refund_reversal").first()
    undo(item=approve_item(item=item, actor=people.reviewer, reason="ok", via="admin"), actor=people.reviewer,
         reason="wrong case", via="admin")
    source = incident.workspace.sources.get(source_id=incident.source_id)
    pages = {
        "lead": (people.lead, [reverse("admin:index"), reverse("admin:repairs_incident_change", args=[incident.pk]),
                               reverse("admin:provenance_source_change", args=[source.pk]),
                               reverse("admin:repairs_incident_changelist")]),
        "reviewer": (people.reviewer, [reverse("admin:compensation_compensationitem_cases"),
                                       reverse("admin:compensation_compensationitem_cases") + f"?incident={incident.pk}",
                                       reverse("admin:compensation_compensationitem_case", args=[incident.pk, "t05"]),
                                       reverse("admin:compensation_compensationitem_change", args=[item.pk])]),
        "auditor": (people.auditor, [reverse("admin:compensation_auditevent_changelist"),
                                     reverse("admin:compensation_auditevent_changelist") + "?action=item.decision_undone"]),
    }
    for role, (user, urls) in pages.items():
        client.force_login(user)
        for url in urls:
            response = client.get(url)
            assert response.status_code == 200, (role, url, response.status_code)
            yield f"{role} {url}", response.content.decode()
    client.force_login(people.reviewer)
    bulk = client.post(reverse("admin:compensation_compensationitem_cases_bulk"),
                       {"case": [f"{incident.pk}/t04", f"{incident.pk}/t05"], "decision": "reject"})
    yield "reviewer bulk confirmation", bulk.content.decode()
    yield "the PDF's HTML", render_html(build_report(incident))


def test_the_main_pages_and_the_pdf_speak_plain_words(canonical, client, settings):
    settings.KINTSUGI_UNDO_SECONDS = 30
    pages = dict(_pages(canonical, client))
    found = {where: words for where, html in pages.items() if (words := jargon(html))}
    assert found == {}
    # Not vacuous: the events and the trust rule are on these pages, in words.
    auditor = next(html for where, html in pages.items() if where.startswith("auditor"))
    assert "Item: decision undone" in auditor and "Item: approved" in auditor
    assert "Set by a support lead" in next(html for where, html in pages.items() if "/source/" in where)
