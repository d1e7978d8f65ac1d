"""Fact keys with `/` (KintsugiStore writes every key as a path) on every surface that names a key in its URL:
the API's fact history, raw and percent-encoded, and the admin's fact and action pages that link to it."""
import re

import pytest

from provenance.models import Workspace
from provenance.recording.services import record_root
from tests.api.test_api_access import assert_error
from tests.helpers import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def faq_desk(make_user):
    import tests.agents_example  # noqa: F401  (registers faq_writer / faq_reader: they write faq/<topic>)

    ws = Workspace.objects.create(name="slash-keys")
    ids = record_root(workspace=ws.name, agent="faq_writer", payload={"topic": "late", "answer": "30 days"})
    lead = make_user("lead", roles=["Support lead"], workspaces=[ws])
    return ws, ids, lead


@pytest.mark.parametrize("spelling", ["faq/late", "faq%2Flate", "faq%2flate"])
def test_fact_history_of_a_key_with_a_slash(faq_desk, spelling):
    ws, _, lead = faq_desk
    response = client_for(lead).get(f"/api/v1/workspaces/{ws.pk}/facts/{spelling}/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["key"] == "faq/late" and [v["value"] for v in body["versions"]] == ["30 days"]


def test_a_key_with_a_slash_that_does_not_exist_is_a_404_of_its_own(faq_desk):
    ws, _, lead = faq_desk
    # The red case the old `[^/]+` route made of every such key: an unknown key answers the fact's 404,
    # not the catch-all's "no API endpoint".
    error = assert_error(client_for(lead).get(f"/api/v1/workspaces/{ws.pk}/facts/faq/early/"), 404, "not_found")
    assert "no API endpoint" not in error["message"]
    assert_error(client_for(lead).get(f"/api/v1/workspaces/{ws.pk}/facts/"), 404)


def test_the_schema_still_names_one_key_parameter():
    paths = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    assert "/api/v1/workspaces/{id}/facts/{key}/" in paths


def test_admin_fact_and_action_pages_of_a_key_with_a_slash(faq_desk, admin_client):
    ws, ids, _ = faq_desk
    fact = admin_client.get(f"/admin/provenance/workspace/{ws.pk}/facts/faq/late/")
    assert fact.status_code == 200 and b"faq/late" in fact.content
    # The reader's page links to the fact it read by its key: reversing a `/` key failed with the `str` converter.
    page = admin_client.get(f"/admin/provenance/workspace/{ws.pk}/actions/{ids[1]}/")
    assert page.status_code == 200
    assert re.search(rf'href="/admin/provenance/workspace/{ws.pk}/facts/faq/late/"', page.content.decode())
