"""Two teams on one kintsugi: members of workspace A, in every role, request every admin URL against
workspace B's objects. Nothing of B shows, nothing of B changes, and attempts to change it are on A's
record. The URLs come from the resolver (tests/tenancy/admin_urls.py), so a new admin view that this
test does not know fails it until it is added there."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from rest_framework.authtoken.models import Token

from compensation.delivery_models import WorkspaceConnector
from compensation.models import AuditEvent, CompensationItem, MessageTemplate
from core.roles import AUDITOR, REVIEWER, SUPPORT_LEAD, WORKSPACE_ADMIN, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import AgentRegistration, AgentToken, LedgerEntry, OutboxEmail, Source, Ticket, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import desk_run, get_workspace
from repairs.models import Incident
from repairs.services import flag_source
from repairs.job import run_repair
from tests.tenancy import admin_urls
from tests.helpers import create_user

ROLES = {
    "lead": [SUPPORT_LEAD], "reviewer": [REVIEWER], "auditor": [AUDITOR], "workspace_admin": [WORKSPACE_ADMIN],
    "no_role": [], "every_role": [SUPPORT_LEAD, REVIEWER, AUDITOR, WORKSPACE_ADMIN],
}


def _user(username: str, groups: list[str], **extra):
    return create_user(username, *groups, **extra)


def _desk(name: str, *, members, flagger, emails: str | None = None) -> Incident:
    desk_run(workspace=name)
    ws = get_workspace(name)
    ws.members.add(*members)
    if emails:
        for t in Ticket.objects.filter(workspace=ws):
            Ticket.objects.filter(pk=t.pk).update(customer_email=t.customer_email.split("@")[0] + emails)
    incident = flag_source(workspace=ws, source_id=POISONED_PAGE, actor=flagger, reason="poisoned", via="cli")
    return run_repair(incident_id=incident.pk)


@pytest.fixture(scope="module")
def two_teams(django_db_setup, django_db_blocker):
    """Workspaces A and B, each the canonical desk repaired, built once for the module inside a
    transaction that is rolled back at the end (FalkorDB is not: the tests only read it)."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            ensure_roles()
            tag = uuid.uuid4().hex[:6]
            people = {role: _user(f"a-{role}-{tag}", groups) for role, groups in ROLES.items()}
            b_lead = _user(f"b-lead-{tag}", [SUPPORT_LEAD])
            a = _desk(f"team-a-{tag}", members=people.values(), flagger=b_lead)
            b = _desk(f"team-b-{tag}", members=[b_lead], flagger=b_lead, emails=admin_urls.B_EMAIL_DOMAIN)
            # B's money has moved and mail has left, so there is a ledger row and an outbox row to try.
            ws_b = b.workspace
            if not OutboxEmail.objects.filter(workspace=ws_b).exists():  # pytest-django's locmem mail
                OutboxEmail.objects.create(workspace=ws_b, run_number=1, to="amara" + admin_urls.B_EMAIL_DOMAIN,
                                           subject="Your refund", body="sent", idempotency_key=f"b-{tag}")
            Token.objects.create(user=b_lead)
            # B's agent in another process and its recording token (set up from B's shell).
            agent, _ = register_agent(workspace=ws_b, name=f"b_agent_{tag}", replay="http://agents-b.example:9100/replay",
                                      actor=None, reason="b's agent", via="cli")
            agent_token, _ = issue_agent_token(workspace=ws_b, label="b's desk", actor=None, reason="b's token",
                                               via="cli")
            # B chose how its reversals leave.
            connector = WorkspaceConnector.objects.create(workspace=ws_b, kind="refund_reversal",
                                                          connector="webhook", options={"url": "https://b.example/h"})
            # B worded its customers' message.
            template = MessageTemplate.objects.create(workspace=ws_b, subject="From team B", body="$explanation",
                                                      updated_by=b_lead)
            yield SimpleNamespace(people=people, a=a, b_lead=b_lead, b=SimpleNamespace(
                workspace=ws_b, incident=b, item=b.compensation_items.order_by("pk").first(),
                item_ids=list(b.compensation_items.values_list("pk", flat=True)),
                source=Source.objects.get(workspace=ws_b, source_id=POISONED_PAGE),
                ticket=Ticket.objects.filter(workspace=ws_b).first(),
                ledger=LedgerEntry.objects.filter(workspace=ws_b).first(),
                outbox=OutboxEmail.objects.filter(workspace=ws_b).first(),
                transition=b.transitions.first(), event=AuditEvent.objects.filter(incident_id=b.pk).first(),
                user=b_lead, group=Group.objects.get(name=REVIEWER), token_user=b_lead, agent=agent,
                agent_token=agent_token, connector=connector, template=template,
                action_id=b.outcomes.filter(status="rerun_changed").first().action_id))
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


def _state_of(b) -> dict:
    ws = b.workspace
    graph = workspace_graph(ws.name)
    return {
        "items": sorted(CompensationItem.objects.filter(incident__workspace=ws).values_list(
            "pk", "status", "amount_cents", "body", "to", "decided_by_id")),
        "ledger": LedgerEntry.objects.filter(workspace=ws).count(),
        "outbox": OutboxEmail.objects.filter(workspace=ws).count(),
        "incidents": sorted(Incident.objects.filter(workspace=ws).values_list("pk", "status")),
        "members": sorted(Workspace.objects.get(pk=ws.pk).members.values_list("pk", flat=True)),
        "sources": sorted(Source.objects.filter(workspace=ws).values_list("pk", "content")),
        "tickets": sorted(Ticket.objects.filter(workspace=ws).values_list("pk", "customer_email")),
        "agents": sorted(AgentRegistration.objects.filter(workspace=ws).values_list("pk", "name", "replay_url",
                                                                                    "timeout_seconds")),
        "agent_tokens": sorted(AgentToken.objects.filter(workspace=ws).values_list("pk", "label", "revoked_at")),
        "connectors": sorted(WorkspaceConnector.objects.filter(workspace=ws).values_list("kind", "connector", "options")),
        "template": list(MessageTemplate.objects.filter(workspace=ws).values_list("subject", "body", "version")),
        "graph": (graph.ro_query("MATCH (n) RETURN count(n)")[0][0],
                  graph.ro_query("MATCH ()-[r]->() RETURN count(r)")[0][0],
                  graph.ro_query("MATCH (a:Action) WHERE a.status IS NOT NULL RETURN count(a)")[0][0]),
    }


def test_every_admin_url_is_known_to_the_tenancy_test(db):
    assert admin_urls.unknown_admin_urls() == []


def test_an_admin_url_nobody_listed_fails_the_tenancy_test(db, monkeypatch):
    """The red case of the URL enumeration: a view added without an entry is named, not skipped."""
    def forgetful(name, b):
        return None if name == "repairs_incident_explain" else admin_urls.requests_for(name, b)

    assert admin_urls.unknown_admin_urls(known=forgetful) == ["repairs_incident_explain"]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_members_of_a_neither_see_nor_change_anything_of_b(role, two_teams, client, db):
    b = two_teams.b
    before = _state_of(b)
    refusals_before = AuditEvent.objects.filter(action="refused").count()
    client.force_login(two_teams.people[role])
    found = admin_urls.leaks(client, b)
    assert found == [], "\n".join(found)
    assert _state_of(b) == before
    # What they tried to change is on the record of their own workspace, never on B's.
    refused = AuditEvent.objects.filter(action="refused", actor=two_teams.people[role]).order_by("seq")
    assert refused.count() > refusals_before
    assert set(refused.values_list("workspace_id", flat=True)) == {two_teams.a.workspace_id}


def test_a_view_left_unscoped_is_caught(two_teams, client, db, monkeypatch):
    """The red case: the incident's custom views stop asking the tenancy rule, and the test says where."""
    from provenance.access import tenancy
    from repairs import admin as repairs_admin

    monkeypatch.setattr(repairs_admin.tenancy, "scoped", lambda qs, **kw: qs)
    client.force_login(two_teams.people["lead"])
    found = admin_urls.leaks(client, two_teams.b)
    assert any("repairs_incident_progress" in f for f in found)
    assert any("repairs_incident_report" in f for f in found)
    assert tenancy.scoped is not None  # only repairs.admin's view of the rule was replaced


def test_the_same_people_work_their_own_workspace(two_teams, client, db):
    """The isolation above is not an empty admin: A's members open A's pages."""
    from django.urls import reverse

    a, people = two_teams.a, two_teams.people
    client.force_login(people["reviewer"])
    item = a.compensation_items.order_by("pk").first()
    assert client.get(reverse("admin:compensation_compensationitem_change", args=[item.pk])).status_code == 200
    assert client.get(reverse("admin:repairs_incident_progress", args=[a.pk])).status_code == 200
    page = client.get(reverse("admin:compensation_compensationitem_changelist")).content.decode()
    assert f"/admin/compensation/compensationitem/{item.pk}/" in page
    board = client.get(reverse("admin:index")).context["dashboard"]
    assert [i.pk for i in board["open_incidents"]] == [a.pk]
    assert board["review_queue"]["pending"] == a.compensation_items.filter(status="pending").count()
    client.force_login(people["lead"])
    assert client.get(reverse("admin:repairs_incident_report", args=[a.pk, "json"])).status_code == 200


def test_a_superuser_sees_both_workspaces(two_teams, client, db):
    from django.urls import reverse

    root = _user(f"root-{uuid.uuid4().hex[:4]}", [], is_superuser=True)
    client.force_login(root)
    page = client.get(reverse("admin:repairs_incident_changelist")).content.decode()
    assert two_teams.a.workspace.name in page and two_teams.b.workspace.name in page
