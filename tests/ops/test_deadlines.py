"""A request whose store is away answers 503 in the error shape with Retry-After, within the store's
deadline (a frozen FalkorDB included), instead of hanging on it."""
from __future__ import annotations

import time

import pytest

from provenance.graph.graph import server_key
from provenance.models import Source, Workspace
from tests.helpers import client_for
from tests.ops.test_frozen_falkordb import frozen  # noqa: F401  (the fixture, by name)

pytestmark = pytest.mark.django_db


def test_a_frozen_graph_store_answers_503_with_retry_after_within_its_deadline(frozen, settings, falkordb_url,  # noqa: F811
                                                                                make_user):
    settings.KINTSUGI_FALKORDB_URLS = [falkordb_url, frozen["url"]]
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 1.0
    ws = Workspace.objects.create(name="ops-deadline", falkordb_server=server_key(frozen["url"]))
    source = Source.objects.create(workspace=ws, source_id="kb/a", content="x")
    lead = make_user("ops-lead", roles=["Support lead"], workspaces=[ws])
    frozen["freeze"]()
    start = time.monotonic()
    answer = client_for(lead).get(f"/api/v1/sources/{source.pk}/blast-radius/")
    assert time.monotonic() - start < 15
    assert answer.status_code == 503, answer.content
    assert answer["Retry-After"].isdigit()
    assert answer.json()["error"]["code"] == "graph_unavailable"
