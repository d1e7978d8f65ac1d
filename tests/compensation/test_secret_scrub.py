"""A model error that echoes its request (and so the API key) is stored scrubbed: in the item's problems,
its audit rows, the incident report and the API's answer."""
import json

import pytest
from rest_framework.authtoken.models import Token

from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import redraft_item
from core.scrub import scrub_secrets
from kintsugi_site.reports import render_report
from tests.helpers import client_for
from tests.fake_gemini import FakeReply

pytestmark = pytest.mark.django_db

KEY = "AIzaSyD-fake-but-key-shaped-0123456789ab"


def test_a_model_error_echoing_the_key_is_stored_without_it(fake_gemini, canonical, settings):
    settings.GEMINI_API_KEY = KEY
    people, incident = canonical.people, canonical.incident
    item = incident.compensation_items.get(kind=CompensationItem.Kind.CORRECTION_EMAIL, ticket_id="t07")
    fake_gemini.queue(FakeReply(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
        f"API key not valid: request https://gen.example/v1beta/models/x?key={KEY} with x-goog-api-key: {KEY}"}}))
    item = redraft_item(item=item, actor=people.reviewer, reason="retry drafting", via="admin")
    assert item.problems[0].startswith("drafting failed") and "[redacted]" in item.problems[0]
    incident.workspace.members.add(people.reviewer)
    Token.objects.get_or_create(user=people.reviewer)
    stored = [json.dumps(item.problems),
              json.dumps(list(AuditEvent.objects.filter(subject_id=str(item.pk)).values("reason", "data")), default=str),
              render_report(incident, "json")[0].decode() if isinstance(render_report(incident, "json")[0], bytes)
              else render_report(incident, "json")[0],
              client_for(people.reviewer).get(f"/api/v1/review-items/{item.pk}/").content.decode()]
    for text in stored:
        assert KEY not in text and KEY[:12] not in text


@pytest.mark.parametrize("leak", [f"key={KEY}", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
                                  "redis://:s3cretpassw0rd@127.0.0.1:6479", '"api_key": "sk-live-123456789abcdef"'])
def test_scrub_secrets_removes_key_like_strings(leak, settings):
    settings.GEMINI_API_KEY = ""
    scrubbed = scrub_secrets(f"failed: {leak} (retry later)")
    assert "[redacted]" in scrubbed and scrubbed.endswith("(retry later)")
    assert not any(part in scrubbed for part in (KEY, "abcdefghijklmnop", "s3cretpassw0rd", "sk-live-1234"))
