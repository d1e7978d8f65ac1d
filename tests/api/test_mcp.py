"""The MCP endpoint, driven over HTTP by the SDK's own client: mounted at /mcp in the web app that the
production server runs (gunicorn with uvicorn workers, as `make demo` does), and standing alone
through `manage.py mcp_serve`."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from typing import Iterator

import httpx2
import pytest
from django.db import connection

from compensation.models import AuditEvent
from provenance.desk.scenario import POISONED_PAGE
from repairs.models import Incident
from tests.helpers import ROOT, api_key, client_for, free_port, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def server_command(kind: str, port: int) -> list[str]:
    if kind == "web":
        return [sys.executable, "-m", "gunicorn", "kintsugi_site.asgi:application", "--worker-class",
                "uvicorn_worker.UvicornWorker", "--workers", "1", "--bind", f"127.0.0.1:{port}", "--no-control-socket"]
    return [sys.executable, "manage.py", "mcp_serve", "--port", str(port)]


def serving(kind: str, log) -> "Iterator[str]":
    """Run a `kind` server against the test database until the generator is closed; yields its /mcp URL."""
    port = free_port()
    env = worker_env(connection.settings_dict["NAME"], KINTSUGI_WEB_PORT=str(port))
    proc = subprocess.Popen(server_command(kind, port), cwd=ROOT, env=env, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module", params=["web", "mcp_serve"])
def mcp_server(request, django_db_setup, tmp_path_factory):
    """One server process for the module, against the test database (each test commits its own rows:
    the tests are transactional): the production web server, then the stand-alone MCP server."""
    yield from serving(request.param, tmp_path_factory.mktemp("mcp") / "mcp.log")


@pytest.fixture
def mcp_url(mcp_server, transactional_db):
    return mcp_server


def call(url: str, token: str, tool: str | None = None, arguments: dict | None = None):
    """One MCP session with the SDK client: list the tools, or call one."""
    # Imported here: the SDK costs every test process that collects this file most of a second.
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def run():
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                if tool is None:
                    return await client.list_tools()
                return await client.call_tool(tool, arguments or {})
    return asyncio.run(run())


@pytest.fixture
def desk(make_user, record_desk):
    ws, source = record_desk("api-mcp")
    lead = make_user("mcp-lead", roles=["Support lead"], workspaces=[ws])
    return ws, source, lead


def test_mcp_client_gets_the_canonical_blast_radius_and_an_explain_path(mcp_url, desk):
    ws, source, lead = desk
    token = api_key(lead)
    tools = {t.name for t in call(mcp_url, token).tools}
    assert {"blast_radius", "explain_path", "flag_source", "incident_status", "review_items", "approve_item",
            "reject_item", "what_if", "suspicious_sources", "open_action",
            "memory_get", "memory_set", "ingest_source", "handoff", "record_effect", "finish_action", "fact_history"} <= tools

    radius = call(mcp_url, token, "blast_radius", {"workspace": ws.name, "source": POISONED_PAGE})
    assert not radius.is_error, radius.content
    assert radius.structured_content["size"] == 25
    assert radius.structured_content["tickets"] == 8
    assert radius.structured_content["amount_at_stake"] == 750

    last = radius.structured_content["actions"][-1]["id"]
    explained = call(mcp_url, token, "explain_path", {"workspace": ws.name, "source": POISONED_PAGE,
                                                     "action_id": last})
    assert not explained.is_error, explained.content
    steps = explained.structured_content["steps"]
    assert steps[0]["agent"] == "research" and steps[0]["reached_by"]["edge"] == "INGESTED"
    assert steps[-1]["action"] == last and len(steps) >= 2


def test_mcp_flag_source_opens_an_incident_and_incident_status_follows_it(mcp_url, desk):
    ws, source, lead = desk
    token = api_key(lead)
    flagged = call(mcp_url, token, "flag_source", {"workspace": ws.name, "source": POISONED_PAGE,
                                                   "reason": "the partner blog invented a VIP rule"})
    assert not flagged.is_error, flagged.content
    incident = Incident.objects.get(pk=flagged.structured_content["incident"])
    assert incident.flagged_via == "mcp" and incident.flagged_by == lead
    status = call(mcp_url, token, "incident_status", {"incident": incident.pk})
    assert status.structured_content["incident"] == incident.pk
    again = call(mcp_url, token, "flag_source", {"workspace": ws.name, "source": POISONED_PAGE, "reason": "again"})
    assert again.is_error and f"#{incident.pk}" in again.content[0].text
    assert Incident.objects.count() == 1


def test_mcp_applies_the_same_roles_and_tenancy(mcp_url, desk, make_user, record_desk):
    ws, source, lead = desk
    auditor = make_user("mcp-auditor", roles=["Auditor"], workspaces=[ws])
    refused = call(mcp_url, api_key(auditor), "flag_source",
                   {"workspace": ws.name, "source": POISONED_PAGE, "reason": "x"})
    assert refused.is_error and "may not flag" in refused.content[0].text
    refusal = AuditEvent.objects.get(action="refused", actor=auditor)
    assert refusal.via == "mcp" and refusal.data["status"] == 403 and "may not flag" in refusal.reason
    outsider = make_user("mcp-outsider", roles=["Support lead"])
    hidden = call(mcp_url, api_key(outsider), "blast_radius", {"workspace": ws.name, "source": POISONED_PAGE})
    assert hidden.is_error and "unknown workspace" in hidden.content[0].text
    assert not Incident.objects.exists()


def test_mcp_refuses_missing_tokens_and_foreign_host_or_origin(mcp_url, desk):
    ws, source, lead = desk
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    auth = {"Authorization": f"Bearer {api_key(lead)}"}
    assert httpx2.post(mcp_url, json=body, headers=headers | auth).status_code == 200
    # The REST API's scheme is accepted too, so one header serves both endpoints.
    token_scheme = {"Authorization": f"Token {api_key(lead)}"}
    assert httpx2.post(mcp_url, json=body, headers=headers | token_scheme).status_code == 200
    assert httpx2.post(mcp_url, json=body, headers=headers).status_code == 401
    assert httpx2.post(mcp_url, json=body, headers=headers | {"Authorization": "Bearer nope"}).status_code == 401
    assert httpx2.post(mcp_url, json=body, headers=headers | auth | {"Host": "evil.example"}).status_code == 421
    assert httpx2.post(mcp_url, json=body, headers=headers | auth | {"Origin": "http://evil.example"}).status_code == 403


def test_the_web_app_serves_the_admin_its_static_files_and_mcp_behind_a_token(mcp_url):
    base = mcp_url.removesuffix("/mcp")
    if "mcp_serve" in str(mcp_url) or httpx2.get(f"{base}/admin/login/", timeout=10).status_code == 404:
        pytest.skip("the stand-alone MCP server serves /mcp only")
    assert httpx2.get(f"{base}/admin/login/", timeout=10).status_code == 200
    assert httpx2.get(f"{base}/static/admin/css/base.css", timeout=10).status_code == 200
    anonymous = httpx2.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                            headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    assert anonymous.status_code == 401


@pytest.fixture
def repaired_desk(desk, make_user, settings):
    """The canonical desk flagged by the lead and repaired in-process (committed: the server reads it)."""
    from repairs.services import flag_source
    from repairs.job import run_repair

    ws, source, lead = desk
    settings.CELERY_TASK_ALWAYS_EAGER = False
    incident = flag_source(workspace=ws, source_id=POISONED_PAGE, actor=lead, reason="poisoned partner page",
                           via=Incident.Via.CLI)
    return ws, run_repair(incident_id=incident.pk), lead


def test_mcp_review_tools_list_and_decide_items_under_the_admins_rules(mcp_url, repaired_desk, make_user):
    from compensation.models import CompensationItem

    ws, incident, lead = repaired_desk
    reviewer = make_user("mcp-reviewer", roles=["Reviewer"], workspaces=[ws])
    listed = call(mcp_url, api_key(reviewer), "review_items", {"workspace": ws.name, "incident": incident.pk})
    assert not listed.is_error, listed.content
    page = listed.structured_content
    assert page["total"] == 10 and {i["kind"] for i in page["items"]} >= {"refund_reversal", "correction_email"}
    reversal = next(i for i in page["items"] if i["kind"] == "refund_reversal" and i["ticket"] == "t05")
    email = next(i for i in page["items"] if i["kind"] == "correction_email" and i["ticket"] == "t05")
    assert reversal["amount"] == "$75.00" and reversal["amount_cents"] == 7500 and email["waits_for"] == reversal["id"]
    # What each item compensates, as the REST API shows it: the refund that left with its key, the email.
    for shown in (reversal, email):
        api = client_for(reviewer).get(f"/api/v1/review-items/{shown['id']}/").json()["compensates"]
        assert shown["compensates"] == api and api, shown
    assert {e["kind"] for e in reversal["compensates"]} == {"refund"}
    assert all(e["idempotency_key"] for e in reversal["compensates"] if e["role"] == "invalidated")

    approved = call(mcp_url, api_key(reviewer), "approve_item", {"item": reversal["id"], "reason": "matches"})
    assert not approved.is_error, approved.content
    assert approved.structured_content["status"] == "approved"
    assert approved.structured_content["decided_by"] == "mcp-reviewer"
    assert approved.structured_content["compensates"] == reversal["compensates"]
    event = AuditEvent.objects.get(action="item.approved", subject_id=str(reversal["id"]))
    assert event.via == "mcp" and event.actor == reviewer and event.reason == "matches"
    rejected = call(mcp_url, api_key(reviewer), "reject_item", {"item": email["id"], "reason": "too stiff"})
    assert rejected.structured_content["status"] == "rejected"
    again = call(mcp_url, api_key(reviewer), "approve_item", {"item": email["id"]})
    assert again.is_error and "already rejected" in again.content[0].text
    t06 = CompensationItem.objects.get(incident=incident, ticket_id="t06", kind="refund_reversal")
    no_reason = call(mcp_url, api_key(reviewer), "reject_item", {"item": t06.pk, "reason": " "})
    assert no_reason.is_error and "reason is required" in no_reason.content[0].text
    t07 = CompensationItem.objects.get(incident=incident, ticket_id="t07", kind="refund_reversal")
    warned = call(mcp_url, api_key(reviewer), "reject_item", {"item": t07.pk, "reason": "kept"})
    assert "will not go out as written" in warned.structured_content["warning"]


def test_mcp_review_keeps_four_eyes_roles_and_tenancy(mcp_url, repaired_desk, make_user, django_user_model):
    from django.contrib.auth.models import Group

    from compensation.models import CompensationItem

    ws, incident, lead = repaired_desk
    item = CompensationItem.objects.filter(incident=incident, kind="refund_reversal").order_by("pk").first()
    lead.groups.add(Group.objects.get(name="Reviewer"))  # both roles: only four-eyes stops the flagger
    own = call(mcp_url, api_key(lead), "approve_item", {"item": item.pk, "reason": "mine"})
    assert own.is_error and "four-eyes" in own.content[0].text
    auditor = make_user("mcp-review-auditor", roles=["Auditor"], workspaces=[ws])
    role = call(mcp_url, api_key(auditor), "approve_item", {"item": item.pk})
    assert role.is_error and "Reviewer role needed" in role.content[0].text
    outsider = make_user("mcp-review-outsider", roles=["Reviewer"])
    hidden = call(mcp_url, api_key(outsider), "approve_item", {"item": item.pk})
    assert hidden.is_error and f"unknown compensation item {item.pk}" in hidden.content[0].text
    listing = call(mcp_url, api_key(outsider), "review_items", {"workspace": ws.name})
    assert listing.is_error and "unknown workspace" in listing.content[0].text
    bad = call(mcp_url, api_key(auditor), "review_items", {"workspace": ws.name, "status": "maybe"})
    assert bad.is_error and "status must be one of" in bad.content[0].text
    item.refresh_from_db()
    assert item.status == "pending" and not AuditEvent.objects.filter(action="item.approved").exists()
    refusals = AuditEvent.objects.filter(action__in=("item.refused", "refused"), via="mcp")
    assert {e.actor_name for e in refusals} >= {lead.username, auditor.username, outsider.username}


def test_mcp_what_if_tells_the_exact_outcome_and_changes_nothing(mcp_url, desk, make_user):
    ws, source, lead = desk
    answer = call(mcp_url, api_key(lead), "what_if", {"workspace": ws.name, "source": POISONED_PAGE})
    assert not answer.is_error, answer.content
    wi = answer.structured_content
    assert (wi["blast_radius"], wi["compensations"], wi["amount_reversed"]) == (25, 10, {"USD": 40000})
    assert len(wi["tickets_changed"]) == 5 and wi["fingerprint"]
    assert AuditEvent.objects.filter(action="what_if.viewed", via="mcp", actor=lead).count() == 1
    ranked = call(mcp_url, api_key(lead), "suspicious_sources", {"workspace": ws.name})
    assert ranked.structured_content["sources"][0]["source"] == POISONED_PAGE
    auditor = make_user("mcp-wi-auditor", roles=["Auditor"], workspaces=[ws])
    refused = call(mcp_url, api_key(auditor), "what_if", {"workspace": ws.name, "source": POISONED_PAGE})
    assert refused.is_error and "Support lead" in refused.content[0].text
    outsider = make_user("mcp-wi-outsider", roles=["Support lead"])
    hidden = call(mcp_url, api_key(outsider), "what_if", {"workspace": ws.name, "source": POISONED_PAGE})
    assert hidden.is_error and "unknown workspace" in hidden.content[0].text
    assert not Incident.objects.exists()


def test_mcp_refuses_a_member_without_a_role_what_the_api_refuses(mcp_url, repaired_desk, make_user):
    """The review queue holds customer emails, drafts and amounts: a member without a role gets a 403 from
    the API and the same refusal from MCP, over the wire."""
    from rest_framework.test import APIClient

    ws, incident, lead = repaired_desk
    member = make_user("mcp-no-role", workspaces=[ws])
    api = APIClient().get("/api/v1/review-items/", HTTP_AUTHORIZATION=f"Token {api_key(member)}")
    assert api.status_code == 403
    for tool, arguments in (("review_items", {"workspace": ws.name}), ("incident_status", {"incident": incident.pk}),
                            ("blast_radius", {"workspace": ws.name, "source": POISONED_PAGE})):
        answer = call(mcp_url, api_key(member), tool, arguments)
        text = answer.content[0].text
        assert answer.is_error and "may not" in text and "@" not in text, (tool, text)
