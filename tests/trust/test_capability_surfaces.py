"""One permission table, every surface: for each role x capability, the admin URL, the API endpoint, the
MCP tool and the CLI command that expose the capability must all allow it or all refuse it, and agree
with provenance.access.capabilities.may. A member without a role reading the review queue through MCP (customer
emails, bodies, amounts) while the API answers 403 is the case this walk was written for."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from compensation.models import CompensationItem
from core.roles import AUDITOR, REVIEWER, SUPPORT_LEAD, WORKSPACE_ADMIN, ensure_roles
from kintsugi_site import mcp_server
from kintsugi_site.api.errors import map_domain_error
from provenance.access import capabilities
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source, Ticket
from provenance.recording.services import desk_run, get_workspace
from repairs.job import run_repair
from repairs.models import ActionOutcome
from repairs.services import flag_source
from tests.helpers import api_key, create_user

ROLES = {"lead": [SUPPORT_LEAD], "reviewer": [REVIEWER], "auditor": [AUDITOR], "workspace_admin": [WORKSPACE_ADMIN],
         "no_role": []}
ALLOWED, REFUSED = "allowed", "refused"


@pytest.fixture(scope="module")
def desk(django_db_setup, django_db_blocker):
    """The canonical desk repaired in one workspace whose members hold each role (and none), built once
    for the module inside a transaction rolled back at its end."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            ensure_roles()
            tag = uuid.uuid4().hex[:6]
            people = {r: create_user(f"cap-{r}-{tag}", *groups) for r, groups in ROLES.items()}
            flagger = create_user(f"cap-flagger-{tag}", SUPPORT_LEAD)
            name = f"caps-{tag}"
            desk_run(workspace=name)
            ws = get_workspace(name)
            ws.members.add(flagger, *people.values())
            for user in people.values():
                Token.objects.create(user=user)
            incident = run_repair(incident_id=flag_source(workspace=ws, source_id=POISONED_PAGE, actor=flagger,
                                                          reason="poisoned", via="cli").pk)
            item = incident.compensation_items.filter(status=CompensationItem.Status.PENDING).order_by("pk").first()
            yield SimpleNamespace(people=people, ws=ws, incident=incident, item=item,
                                  ticket=Ticket.objects.get(workspace=ws, ticket_id=item.ticket_id),
                                  action_id=ActionOutcome.objects.filter(incident=incident, ticket=item.ticket_id)
                                  .order_by("seq").values_list("action_id", flat=True).first(),
                                  source=Source.objects.get(workspace=ws, source_id=POISONED_PAGE))
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


# --- how each surface is asked, and what its answer means -----------------------------------------------------
def _admin(method: str, url: str):
    def ask(user, d):
        client = Client()
        client.force_login(user)
        code = getattr(client, method)(url.format(d=d)).status_code
        return REFUSED if code == 403 else ALLOWED
    return ask


def _api(method: str, url: str, data=None):
    def ask(user, d):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
        code = getattr(client, method)(url.format(d=d), data or {}, format="json").status_code
        return REFUSED if code == 403 else ALLOWED
    return ask


def _dashboard(section: str):
    """The dashboard (/admin/) shows a section only to whom its capability allows: the page itself is open
    to every member, so the answer is whether the section is on it."""
    def ask(user, d):
        client = Client()
        client.force_login(user)
        page = client.get("/admin/")
        assert page.status_code == 200
        return ALLOWED if f'id="{section}"' in page.content.decode() else REFUSED
    return ask


def _mcp(fn, **kwargs):
    """The tool's own function as the token's user; a refusal is what the endpoint maps to 403."""
    def ask(user, d):
        try:
            fn(user=user, **{k: (v(d) if callable(v) else v) for k, v in kwargs.items()})
        except Exception as exc:
            mapped = map_domain_error(exc)
            assert mapped is not None, f"{fn.__name__} failed: {exc!r}"
            return REFUSED if mapped[0] == 403 else ALLOWED
        return ALLOWED
    return ask


def _rejected(ask):
    """A decision is judged by its effect: the item rejected or not."""
    def judge(user, d):
        try:
            ask(user, d)
        except Exception as exc:
            if map_domain_error(exc) is None:
                raise
        item = CompensationItem.objects.get(pk=d.item.pk)
        return ALLOWED if item.status == CompensationItem.Status.REJECTED else REFUSED
    return judge


def _raises(fn):
    def run(user, d):
        try:
            return fn(user, d)
        except SystemExit:
            return None
    return run


SURFACES = {
    "read_items": {
        "admin": _admin("get", "/admin/compensation/compensationitem/"),
        "admin_item": _admin("get", "/admin/compensation/compensationitem/{d.item.pk}/change/"),
        "admin_cases": _admin("get", "/admin/compensation/compensationitem/cases/?status=all"),
        "admin_case": _admin("get", "/admin/compensation/compensationitem/cases/{d.incident.pk}/{d.item.ticket_id}/"),
        # The review queue's size, the money it would move and the failed deliveries.
        "dashboard_queue": _dashboard("review-queue"),
        "dashboard_amount": _dashboard("pending-amount"),
        "dashboard_deliveries": _dashboard("failed-deliveries"),
        "api_item": _api("get", "/api/v1/review-items/{d.item.pk}/"),
        "api": _api("get", "/api/v1/review-items/"),
        "mcp": _mcp(mcp_server.review_items, workspace=lambda d: d.ws.name, incident=None, status=None, limit=50,
                    offset=0),
    },
    "read_incidents": {
        "admin": _admin("get", "/admin/repairs/incident/"),
        "admin_page": _admin("get", "/admin/repairs/incident/{d.incident.pk}/change/"),
        "admin_report": _admin("get", "/admin/repairs/incident/{d.incident.pk}/report.csv"),
        "admin_progress": _admin("get", "/admin/repairs/incident/{d.incident.pk}/progress/"),
        "dashboard_open": _dashboard("open-incidents"),
        "dashboard_flags": _dashboard("recent-flags"),
        "api_incident": _api("get", "/api/v1/incidents/{d.incident.pk}/"),
        "api_report": _api("get", "/api/v1/incidents/{d.incident.pk}/report/?format=json"),
        "api": _api("get", "/api/v1/incidents/"),
        "mcp": _mcp(mcp_server.incident_status, incident=lambda d: d.incident.pk),
    },
    "read_tickets": {  # customers' names, addresses and amounts
        "admin": _admin("get", "/admin/provenance/ticket/"),
        "admin_ticket": _admin("get", "/admin/provenance/ticket/{d.ticket.pk}/change/"),
    },
    "read_ledger": {"admin": _admin("get", "/admin/provenance/ledgerentry/")},
    "read_outbox": {"admin": _admin("get", "/admin/provenance/outboxemail/")},
    "read_sources": {
        "api": _api("get", "/api/v1/sources/"),
        # What an action decided for its ticket (customers, amounts), a fact's history, the sources worth a look.
        "admin_action": _admin("get", "/admin/provenance/workspace/{d.ws.pk}/actions/{d.action_id}/"),
        "api_action": _api("get", "/api/v1/workspaces/{d.ws.pk}/actions/{d.action_id}/"),
        "admin_fact": _admin("get", "/admin/provenance/workspace/{d.ws.pk}/facts/vip_rules/"),
        "api_fact": _api("get", "/api/v1/workspaces/{d.ws.pk}/facts/vip_rules/"),
        "admin_suspicious": _admin("get", "/admin/provenance/workspace/{d.ws.pk}/suspicious/"),
        "api_suspicious": _api("get", "/api/v1/workspaces/{d.ws.pk}/suspicious-sources/"),
        "dashboard_suspicious": _dashboard("sources-worth-a-look"),
        "mcp": _mcp(mcp_server.blast_radius, workspace=lambda d: d.ws.name, source=POISONED_PAGE, limit=10, offset=0),
    },
    "flag": {
        "admin": _admin("get", "/admin/provenance/source/{d.source.pk}/flag/"),
        "api": _api("post", "/api/v1/incidents/999999999/retry/", {"reason": "x"}),
        "mcp": _mcp(mcp_server.what_if, workspace=lambda d: d.ws.name, source="no-such/source"),
        "cli": "what_if",  # asked in the test itself: the refusal is read from its stderr
    },
    "edit_message_template": {  # a Support lead words the workspace's customer messages
        "admin": _admin("get", "/admin/compensation/messagetemplate/workspace/{d.ws.pk}/"),
        "admin_list": _admin("get", "/admin/compensation/messagetemplate/"),
    },
    "review": {
        "admin": _rejected(lambda u, d: _admin_post_reject(u, d)),
        "api": _rejected(lambda u, d: _api("post", "/api/v1/review-items/{d.item.pk}/reject/", {"reason": "no"})(u, d)),
        "mcp": _rejected(lambda u, d: mcp_server.reject_item(user=u, item=d.item.pk, reason="no")),
        "cli": _rejected(lambda u, d: _raises(lambda u2, d2: call_command(
            "review", "--item", str(d2.item.pk), "--decision", "reject", "--reason", "no", "--user", u2.username))(u, d)),
    },
}


def _admin_post_reject(user, d):
    client = Client()
    client.force_login(user)
    client.post(f"/admin/compensation/compensationitem/{d.item.pk}/decide/", {"decision": "reject", "reason": "no"})


CASES = [(role, cap, surface) for role in ROLES for cap, surfaces in SURFACES.items() for surface in surfaces]


@pytest.mark.parametrize("role,capability,surface", CASES)
def test_every_surface_answers_as_the_capability_table_says(desk, capsys, role, capability, surface):
    user = desk.people[role]
    expected = ALLOWED if capabilities.may(user, capability, via="cli" if surface == "cli" else surface) else REFUSED
    with transaction.atomic():
        if surface == "cli" and capability == "flag":
            # The operator's act: --user is attributed, the role not asked (capabilities.OPERATOR_ACTS).
            try:
                call_command("what_if", "--workspace", desk.ws.name, "--source", "no-such/source",
                             "--user", user.username)
                answer = ALLOWED
            except SystemExit:
                answer = REFUSED if "may not" in capsys.readouterr().err else ALLOWED
        else:
            answer = SURFACES[capability][surface](user, desk)
        transaction.set_rollback(True)
    assert answer == expected, f"{surface} says {answer} for {role} / {capability}; the table says {expected}"


@pytest.mark.django_db
def test_the_table_names_permissions_the_roles_grant():
    """Every capability is held through a permission that exists and that some role grants; an unknown
    capability is an error, never a silent no."""
    from django.contrib.auth.models import Permission

    from core.roles import ROLES as GRANTS

    for capability, perm in capabilities.CAPABILITIES.items():
        app_label, codename = perm.split(".")
        assert Permission.objects.filter(content_type__app_label=app_label, codename=codename).exists(), capability
        assert any(perm in perms for perms in GRANTS.values()), f"no role holds {capability} ({perm})"
        holders = tuple(role for role, perms in GRANTS.items() if perm in perms)
        assert set(capabilities.HELD_BY[capability]) == set(holders), f"{capability}: the refusals name the wrong roles"
    assert set(capabilities.HELD_BY) == set(capabilities.CAPABILITIES)
    with pytest.raises(LookupError):
        capabilities.may(None, "no_such_capability")


@pytest.mark.django_db
def test_a_member_without_a_role_gets_no_review_item_through_mcp(desk):
    """The red case: the review queue holds customer emails, drafts and amounts."""
    user = desk.people["no_role"]
    assert APIClient().get("/api/v1/review-items/", HTTP_AUTHORIZATION=f"Token {api_key(user)}").status_code == 403
    with pytest.raises(PermissionError, match="may not"):
        mcp_server.review_items(user=user, workspace=desk.ws.name, incident=None, status=None, limit=50, offset=0)
    with pytest.raises(PermissionError):
        mcp_server.incident_status(user=user, incident=desk.incident.pk)
    with pytest.raises(PermissionError):
        mcp_server.blast_radius(user=user, workspace=desk.ws.name, source=POISONED_PAGE, limit=10, offset=0)
    page = mcp_server.review_items(user=desk.people["reviewer"], workspace=desk.ws.name, incident=None, status=None,
                                   limit=50, offset=0)
    assert page["total"] > 0 and page["items"][0]["customer_email"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["no_role", "workspace_admin"])
def test_the_dashboard_shows_a_member_without_a_review_role_no_incident_money_or_delivery(desk, role):
    """The red case: /admin/ listed the incidents, the money the queue would move and the failed deliveries
    to a member whom GET /api/v1/incidents/ answers 403 and MCP refuses."""
    user = desk.people[role]
    assert APIClient().get("/api/v1/incidents/", HTTP_AUTHORIZATION=f"Token {api_key(user)}").status_code == 403
    client = Client()
    client.force_login(user)
    page = client.get("/admin/").content.decode()
    for shown in (POISONED_PAGE, "Pending items", "Their total amount", "Failed deliveries",
                  f"/admin/repairs/incident/{desk.incident.pk}/"):
        assert shown not in page, f"the dashboard shows {role} {shown!r}"
    assert desk.ws.name in page  # the workspace itself, as the API's workspace list shows every member
    client.force_login(desk.people["lead"])
    lead_page = client.get("/admin/").content.decode()
    assert POISONED_PAGE in lead_page and "Their total amount" in lead_page
