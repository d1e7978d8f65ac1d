"""A source id is up to 200 characters on every door (the API's schema, the models, validation), and the
audit row that records it holds all of them: a source of 65 to 200 characters answered 500 (its audit
row's subject id held 64), one of 201 is a clear refusal with nothing written."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from compensation.models import AuditEvent
from kintsugi_site import mcp_server
from kintsugi_site.api.errors import map_domain_error
from provenance.models import Source
from repairs.models import Incident
from tests.helpers import client_for, create_user, row_counts

pytestmark = pytest.mark.django_db

LONGEST = "policy/" + "p" * 193  # 200 characters
TOO_LONG = LONGEST + "x"


@pytest.fixture
def desk(repaired):
    ws = repaired.incident.workspace
    admin = create_user("long-ids-admin", "Workspace admin", workspaces=[ws])
    lead = repaired.people.lead
    ws.members.add(lead)
    for user in (admin, lead):
        Token.objects.get_or_create(user=user)
    return ws, admin, lead


def _cli(*args) -> int:
    try:
        call_command(*args)
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.parametrize("source_id", ["policy/" + "p" * 58, LONGEST])  # 65 and 200 characters
def test_a_source_id_up_to_200_characters_is_created_flagged_and_recorded_on_every_door(desk, source_id):
    ws, admin, lead = desk
    answer = client_for(admin).post(f"/api/v1/workspaces/{ws.pk}/sources/",
                                    {"source_id": source_id, "content": "a policy", "reason": "new page"}, format="json")
    assert answer.status_code == 201, answer.content
    assert AuditEvent.objects.get(action="source.created", subject_id=source_id).workspace_id == ws.pk
    by_cli = "cli/" + source_id[4:]
    assert _cli("onboard", "source", "--workspace", ws.name, "--source", by_cli, "--content", "x",
                "--user", admin.username, "--reason", "new page") == 0
    assert AuditEvent.objects.filter(action="source.created", subject_id=by_cli).exists()
    flagged = client_for(lead).post(f"/api/v1/sources/{Source.objects.get(workspace=ws, source_id=source_id).pk}/flag/",
                                    {"reason": "poisoned"}, format="json")
    assert flagged.status_code == 201, flagged.content
    assert Incident.objects.get(pk=flagged.json()["id"]).source_id == source_id


def test_a_source_id_of_201_characters_is_refused_on_every_door_with_nothing_written(desk, client):
    ws, admin, lead = desk
    before = row_counts()
    answer = client_for(admin).post(f"/api/v1/workspaces/{ws.pk}/sources/",
                                    {"source_id": TOO_LONG, "content": "a policy", "reason": "new page"}, format="json")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid", answer.content
    assert "200" in str(answer.json()["error"])
    assert _cli("onboard", "source", "--workspace", ws.name, "--source", TOO_LONG, "--content", "x",
                "--user", admin.username, "--reason", "new page") == 2
    assert _cli("flag_source", "--workspace", ws.name, "--source", TOO_LONG, "--reason", "poisoned",
                "--user", lead.username) == 2
    for fn, kwargs in ((mcp_server.flag_source, {"reason": "poisoned"}), (mcp_server.what_if, {}),
                       (mcp_server.blast_radius, {"limit": 10, "offset": 0})):
        with pytest.raises(Exception) as refused:
            fn(user=lead, workspace=ws.name, source=TOO_LONG, **kwargs)
        assert map_domain_error(refused.value)[0] == 400, (fn.__name__, refused.value)
    assert client_for(lead).get(f"/api/v1/incidents/?source={TOO_LONG}").status_code == 400
    client.force_login(create_user("long-ids-super", is_superuser=True))
    page = client.post("/admin/provenance/source/add/", {"workspace": ws.pk, "source_id": TOO_LONG, "content": "x"})
    assert page.status_code == 200 and "at most 200 characters" in page.content.decode()
    assert row_counts() == before
