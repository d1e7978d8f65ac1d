"""The what-if says what containment will hold: the fact versions a flag would contain at once, in
`what_if --json`, the API's what-if and the flag page, and exactly what the flag then contains."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Containment, Source
from provenance.recording.services import desk_run
from repairs.what_if import WHAT_IF_KEYS
from tests.helpers import open_incident

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = ("source", "blast_radius", "counts", "effects_invalidated", "compensations", "amount_reversed",
          "tickets_changed")


def test_the_what_if_tells_the_versions_the_flag_then_contains(client, django_user_model):
    desk_run(workspace="cprev")
    out = io.StringIO()
    call_command("what_if", workspace="cprev", source=POISONED_PAGE, json=True, stdout=out)
    cli = json.loads(out.getvalue())
    assert set(cli) == set(BEFORE) | {"containment"} == set(WHAT_IF_KEYS)  # the keys it had, and the new one
    preview = cli["containment"]
    # The canonical page reached memory through one version: vip_rules as it rewrote it.
    assert preview == {"facts": 1, "sample": [{"key": "vip_rules", "version": 2}]}

    text = io.StringIO()
    call_command("what_if", workspace="cprev", source=POISONED_PAGE, stdout=text)
    assert "1 fact version would be contained at the flag: vip_rules v2" in text.getvalue()

    admin = django_user_model.objects.create_superuser("cp-root", "cp@example.com", "pass-1234-kintsugi")
    api = APIClient()
    api.force_authenticate(user=admin)
    source = Source.objects.get(workspace__name="cprev", source_id=POISONED_PAGE)
    assert api.get(f"/api/v1/sources/{source.pk}/what-if/").json()["containment"] == preview
    client.force_login(admin)
    page = client.get(reverse("admin:provenance_source_flag", args=[source.pk])).content.decode()
    assert f'data-what-if="containment" data-facts="{preview["facts"]}"' in page
    assert "1 fact version it put into memory would be contained at once (vip_rules v2)" in page

    row = Containment.objects.get(incident_id=open_incident("cprev").pk)
    assert row.facts == preview["facts"]  # what the preview said is what the flag contained
    assert [{"key": k, "version": v} for k, v in row.sample] == preview["sample"]

