"""The admin's edge: edit-then-approve, flag and close refuse NUL bytes and values no column can hold
with a message on the page, never a 500, and nothing changes."""
import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from compensation.models import CompensationItem
from provenance.models import Source
from repairs.models import Incident
from tests.helpers import row_counts

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind


def _pending(incident, kind):
    return incident.compensation_items.filter(kind=kind, status="pending").order_by("pk").first()


def _errors(response) -> list[str]:
    return [m.message for m in get_messages(response.wsgi_request) if m.level_tag == "error"]


@pytest.mark.parametrize("kind, edits", [
    (K.REFUND_REVERSAL, {"amount_cents": "99999999999"}),
    (K.REFUND_REVERSAL, {"amount_cents": "-5"}),
    (K.REFUND_REVERSAL, {"amount_cents": "lots"}),
    (K.REFUND_REVERSAL, {"body": "a NUL \x00 in the note"}),
    (K.CORRECTION_EMAIL, {"to": "a" * 308 + "@example.com"}),
    (K.CORRECTION_EMAIL, {"subject": "hello\x00"}),
])
def test_edit_then_approve_refuses_bad_values_on_the_page(client, repaired, kind, edits):
    item = _pending(repaired.incident, kind)
    fields = {f.name: getattr(item, f.name) for f in CompensationItem._meta.fields}
    before = row_counts()
    client.force_login(repaired.people.reviewer)
    response = client.post(reverse("admin:compensation_compensationitem_decide", args=[item.pk]),
                           {"decision": "edit_approve", "reason": "edited", **edits}, follow=True)
    assert response.status_code == 200
    assert any(message.startswith("Refused") for message in _errors(response)), _errors(response)
    item.refresh_from_db()
    assert {f.name: getattr(item, f.name) for f in CompensationItem._meta.fields} == fields
    counts = row_counts()
    # A 320-character address fits the column: the draft checks refuse it and record that refusal.
    refused_audits = counts.pop("AuditEvent") - before.pop("AuditEvent")
    assert counts == before and refused_audits <= 1


def test_a_nul_in_a_flag_reason_is_a_form_error(client, repaired):
    source = Source.objects.exclude(source_id=repaired.incident.source_id).filter(
        workspace=repaired.incident.workspace).first()
    before = row_counts()
    client.force_login(repaired.people.lead)
    response = client.post(reverse("admin:provenance_source_flag", args=[source.pk]), {"reason": "bad\x00page"},
                           follow=True)
    assert response.status_code == 200 and any("control character" in m for m in _errors(response))
    assert row_counts() == before


@pytest.mark.parametrize("reason", ["closing\x00", "x" * 2001])
def test_a_bad_close_reason_is_refused_on_the_page(client, repaired, reason):
    before = row_counts()
    client.force_login(repaired.people.lead)
    response = client.post(reverse("admin:repairs_incident_close", args=[repaired.incident.pk]), {"reason": reason},
                           follow=True)
    assert response.status_code == 200 and _errors(response)
    assert Incident.objects.get(pk=repaired.incident.pk).status == "repaired" and row_counts() == before
