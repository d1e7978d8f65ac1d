"""A source's trust over the API (POST /api/v1/sources/{id}/trust/) and the command line
(`manage.py source_trust`): the same service as the admin's trust form, the Support lead role, one
`source.trust_set` audit event; unknown levels, sources, other teams' sources and missing reasons are
refused with nothing changed."""
import json

import pytest
from django.core.management import call_command

from compensation.models import AuditEvent
from provenance.models import Source, Workspace
from tests.helpers import client_for
from tests.api.test_api_access import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams(make_user):
    ours, theirs = Workspace.objects.create(name="trust-ours"), Workspace.objects.create(name="trust-theirs")
    page = Source.objects.create(workspace=ours, source_id="partner-blog/tips", content="Refund everyone.")
    their_page = Source.objects.create(workspace=theirs, source_id="kb/returns", content="Returns in 30 days.")
    lead = make_user("trust-lead", roles=["Support lead"], workspaces=[ours])
    return ours, page, their_page, lead


def _url(source) -> str:
    return f"/api/v1/sources/{source.pk if hasattr(source, 'pk') else source}/trust/"


def _trust_events():
    return AuditEvent.objects.filter(action="source.trust_set").count()


def test_a_support_lead_sets_trust_and_it_is_on_the_record(teams):
    ours, page, _, lead = teams
    answer = client_for(lead).post(_url(page), {"trust": "untrusted", "reason": "a partner blog is not policy"},
                                   format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["trust"] == "untrusted" and answer.json()["source_id"] == page.source_id
    assert Source.objects.get(pk=page.pk).trust == "untrusted"
    event = AuditEvent.objects.get(action="source.trust_set")
    assert (event.workspace_id, event.actor, event.via, event.reason) == (ours.pk, lead, "api",
                                                                          "a partner blog is not policy")
    assert (event.from_status, event.to_status, event.data["source"]) == ("unknown", "untrusted", page.source_id)
    # The list shows it too.
    listed = client_for(lead).get("/api/v1/sources/").json()["results"]
    assert [(s["source_id"], s["trust"]) for s in listed] == [(page.source_id, "untrusted")]


@pytest.mark.parametrize("body, field", [
    ({"trust": "very", "reason": "r"}, "trust"),
    ({"trust": "", "reason": "r"}, "trust"),
    ({"reason": "r"}, "trust"),
    ({"trust": "trusted"}, "reason"),
    ({"trust": "trusted", "reason": "   "}, "reason"),
    ({"trust": "trusted", "reason": "r", "level": "trusted"}, "level"),
])
def test_bad_bodies_are_400_naming_the_field_and_change_nothing(teams, body, field):
    _, page, _, lead = teams
    error = assert_error(client_for(lead).post(_url(page), body, format="json"), 400, "invalid")
    assert field in error["details"]
    assert Source.objects.get(pk=page.pk).trust == "unknown" and _trust_events() == 0


def test_unknown_and_other_teams_sources_are_404_and_the_attempt_is_on_our_record(teams):
    ours, _, their_page, lead = teams
    assert_error(client_for(lead).post(_url(999999), {"trust": "trusted", "reason": "r"}, format="json"), 404,
                 "not_found")
    assert_error(client_for(lead).post(_url(their_page), {"trust": "untrusted", "reason": "r"}, format="json"), 404,
                 "not_found")
    assert Source.objects.get(pk=their_page.pk).trust == "unknown" and _trust_events() == 0
    refusals = AuditEvent.objects.filter(action="refused", actor=lead).order_by("seq")
    assert [(e.workspace_id, e.subject_type, e.subject_id, e.data["status"]) for e in refusals] == [
        (ours.pk, "source", "999999", 404), (ours.pk, "source", str(their_page.pk), 404)]


@pytest.mark.parametrize("roles", [["Reviewer"], ["Workspace admin"], ["Auditor"], []])
def test_other_roles_are_403_before_the_body_is_read(teams, make_user, roles):
    ours, page, _, _ = teams
    member = make_user("trust-member", roles=roles, workspaces=[ours])
    for body in ({"trust": "trusted", "reason": "r"}, {"trust": "very"}):
        error = assert_error(client_for(member).post(_url(page), body, format="json"), 403, "permission_denied")
        assert "Support lead" in error["message"]
    assert_error(client_for().post(_url(page), {"trust": "trusted", "reason": "r"}, format="json"), 401)
    assert Source.objects.get(pk=page.pk).trust == "unknown" and _trust_events() == 0


def test_the_endpoint_is_in_the_schema(client):
    paths = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    post = paths["/api/v1/sources/{id}/trust/"]["post"]
    assert {"200", "400", "403", "404"} <= set(post["responses"])


# --- the command line ---------------------------------------------------------------------------------
def _cli(*args):
    call_command("source_trust", *args)


def test_the_command_line_sets_trust_as_user(teams, capsys):
    ours, page, _, lead = teams
    _cli("--workspace", ours.name, "--source", page.source_id, "--trust", "trusted", "--user", lead.username,
         "--reason", "we wrote it")
    assert capsys.readouterr().out.strip() == f"{page.source_id} in {ours.name} is now trusted"
    _cli("--workspace", ours.name, "--source", page.source_id, "--trust", "untrusted", "--user", lead.username,
         "--reason", "it changed", "--json")
    assert json.loads(capsys.readouterr().out) == {"workspace": ours.name, "source": page.source_id, "id": page.pk,
                                                   "trust": "untrusted"}
    events = AuditEvent.objects.filter(action="source.trust_set").order_by("seq")
    assert [(e.via, e.actor, e.from_status, e.to_status, e.reason) for e in events] == [
        ("cli", lead, "unknown", "trusted", "we wrote it"), ("cli", lead, "trusted", "untrusted", "it changed")]


def test_the_command_line_refuses_in_one_line_with_exit_2_and_changes_nothing(teams, make_user, capsys):
    ours, page, their_page, lead = teams
    make_user("trust-reviewer", roles=["Reviewer"], workspaces=[ours])
    base = {"--workspace": ours.name, "--source": page.source_id, "--trust": "trusted", "--user": lead.username,
            "--reason": "r"}
    for changes, message in [
        ({"--trust": "very"}, "trust must be one of untrusted, unknown, trusted"),
        ({"--source": "kb/nowhere"}, "unknown source 'kb/nowhere'"),
        ({"--workspace": "nowhere"}, "unknown workspace 'nowhere'"),
        ({"--user": "nobody"}, "unknown user 'nobody'"),
        ({"--reason": "  "}, "a reason is required"),
        ({"--user": "trust-reviewer"}, "may not set source trust (Support lead role needed)"),
    ]:
        args = [part for pair in ({**base, **changes}).items() for part in pair]
        with pytest.raises(SystemExit) as exit_:
            _cli(*args)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and err.startswith("error: ") and message in err, err
        assert "\n" not in err
    assert Source.objects.get(pk=page.pk).trust == "unknown" and _trust_events() == 0
