"""One set of numbers for what waits for review: the API, the incident list, the incident page, the
dashboard, the case list and the JSON report say the same items, cases and money in the same words, and
a repaired incident whose items wait never reads "Repaired" alone."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from compensation.review.services import approve_item, reject_item

pytestmark = pytest.mark.django_db


def _everywhere(incident, user, client) -> dict[str, str]:
    api = APIClient()
    api.force_authenticate(user=user)
    client.force_login(user)
    report = client.get(reverse("admin:repairs_incident_report", args=[incident.pk, "json"]))
    body = b"".join(report.streaming_content) if report.streaming else report.content
    return {
        "api": api.get(f"/api/v1/incidents/{incident.pk}/").json()["review"]["status_text"],
        "report": json.loads(body)["review"]["status_text"],
        "incident list": client.get(reverse("admin:repairs_incident_changelist")).content.decode(),
        "incident page": client.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode(),
        "dashboard": client.get(reverse("admin:index")).content.decode(),
        "case list": client.get(reverse("admin:compensation_compensationitem_cases") + f"?incident={incident.pk}")
        .content.decode(),
    }


def test_every_page_says_the_same_thing_about_what_waits(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    assert incident.status == "repaired"
    pages = _everywhere(incident, reviewer, client)
    for where, text in pages.items():
        assert "Needs review · 10 · $400.00" in text, where
    assert '<span class="ks-status repaired" id="incident-status" data-phase="' in pages["incident page"]
    assert ">Repaired<" not in pages["incident page"] and ">Repaired<" not in pages["dashboard"]
    assert "10 in 5 cases" in pages["incident list"]
    # Decided elsewhere (the item queue): every page moves together.
    items = incident.compensation_items.filter(ticket_id="t04").order_by("kind")
    for item in items:
        approve_item(item=item, actor=reviewer, reason="ok", via="api")
    pages = _everywhere(incident, reviewer, client)
    for where, text in pages.items():
        assert "Needs review · 8 · $345.00" in text, where
    assert "8 in 4 cases" in pages["incident list"]


def test_nothing_waiting_reads_repaired(canonical, client):
    incident, reviewer = canonical.incident, canonical.people.reviewer
    for item in incident.compensation_items.all():
        reject_item(item=item, actor=reviewer, reason="handled by phone", via="admin")
    pages = _everywhere(incident, reviewer, client)
    assert pages["api"] == pages["report"] == "Repaired"
    assert "Needs review" not in pages["incident page"] + pages["incident list"] + pages["dashboard"]
