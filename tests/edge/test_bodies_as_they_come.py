"""Bodies as they come, through the real production server (gunicorn with its uvicorn worker, as
`make demo` runs it), which sees `Transfer-Encoding: chunked`: a chunked body is read within the same
limit as one with a Content-Length (413 beyond it, in the error shape of the door), never taken for an
empty one. The red cases: an approval sent chunked was decided with the default reason instead of the one
it carried, and a chunked 3 MB body at /mcp answered 500. And /metrics through a proxy on the same host:
every client arrives from loopback, so a request carrying X-Forwarded-For needs the token."""
from __future__ import annotations

import http.client
import json
import subprocess

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from compensation.models import AuditEvent, CompensationItem
from core.roles import REVIEWER, SUPPORT_LEAD
from provenance.models import Workspace
from repairs.models import Incident
from tests.edge.test_lockout_behind_proxies import serve
from tests.helpers import create_user

pytestmark = pytest.mark.django_db(transaction=True)
THREE_MB = 3_000_000


def mcp_headers(token: str) -> dict:
    # The MCP endpoint serves only requests naming the configured web address (DNS-rebinding protection).
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Host": f"{settings.KINTSUGI_WEB_HOST}:{settings.KINTSUGI_WEB_PORT}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_setup, django_db_blocker):
    """One production server for the module (its start is the slow part), on the test database."""
    with django_db_blocker.unblock():
        proc, base = serve(tmp_path_factory.mktemp("bodies"), KINTSUGI_METRICS_TOKEN="scrape-token")
    yield base.removeprefix("http://")
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def send(host: str, method: str, path: str, chunks: list[bytes] | None = None, *, headers: dict | None = None,
         body: bytes | None = None) -> tuple[int, bytes]:
    """One request; `chunks` go as `Transfer-Encoding: chunked` with no Content-Length."""
    conn = http.client.HTTPConnection(host, timeout=60)
    try:
        if chunks is None:
            conn.request(method, path, body=body, headers=headers or {})
        else:
            conn.putrequest(method, path, skip_host="Host" in (headers or {}), skip_accept_encoding=True)
            for name, value in {**(headers or {}), "Transfer-Encoding": "chunked"}.items():
                conn.putheader(name, value)
            conn.endheaders()
            for chunk in chunks:
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.send(b"0\r\n\r\n")
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@pytest.fixture
def pending_item():
    ws = Workspace.objects.create(name="chunked-bodies")
    flagger = create_user("chunked-flagger", SUPPORT_LEAD, workspaces=[ws])
    reviewer = create_user("chunked-reviewer", REVIEWER, workspaces=[ws])
    incident = Incident.objects.create(workspace=ws, run_number=1, source_id="partner/page", reason="poisoned",
                                       flagged_by=flagger, flagged_via="cli", status="repaired")
    item = CompensationItem.objects.create(
        incident=incident, kind=CompensationItem.Kind.CORRECTION_EMAIL, draft_key="chunked:1", ticket_id="t01",
        customer_email="ann@customers.example", to="ann@customers.example", subject="A correction",
        body="Dear Ann, an earlier message was wrong.", facts={"customer_email": "ann@customers.example"},
        original={}, valid=True)
    return item, Token.objects.create(user=reviewer).plain_key


def test_an_approval_sent_chunked_is_decided_with_the_reason_it_carries(server, pending_item):
    item, token = pending_item
    reason = json.dumps({"reason": "checked with the customer by phone"}).encode()
    status, body = send(server, "POST", f"/api/v1/review-items/{item.pk}/approve/", [reason[:10], reason[10:]],
                        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    assert status == 200, body
    decided = AuditEvent.objects.get(action="item.approved", subject_id=str(item.pk))
    assert decided.reason == "checked with the customer by phone"


def test_a_chunked_body_beyond_the_limit_is_413_at_the_api_and_nothing_is_written(server, pending_item):
    item, token = pending_item
    huge = [b'{"reason": "', *[b"a" * 100_000] * (THREE_MB // 100_000), b'"}']
    status, body = send(server, "POST", f"/api/v1/review-items/{item.pk}/approve/", huge,
                        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large", body[:300]
    item.refresh_from_db()
    assert item.status == "pending"
    assert not AuditEvent.objects.filter(subject_type="compensation_item", subject_id=str(item.pk)).exists()


def test_a_chunked_body_beyond_the_limit_is_413_at_mcp(server, pending_item):
    _, token = pending_item
    mcp = [b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "',
           *[b"a" * 100_000] * (THREE_MB // 100_000), b'"}}']
    status, body = send(server, "POST", "/mcp", mcp, headers=mcp_headers(token))
    assert status == 413 and "larger than" in json.loads(body)["error"]["message"], body[:300]


def test_a_chunked_mcp_call_within_the_limit_is_answered(server, pending_item):
    _, token = pending_item
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    status, body = send(server, "POST", "/mcp", [call[:7], call[7:]], headers=mcp_headers(token))
    assert status == 200 and b"review_items" in body, body[:300]


def test_metrics_through_a_proxy_on_the_same_host_need_the_token(server):
    assert send(server, "GET", "/metrics")[0] == 200  # loopback, no proxy in front
    status, body = send(server, "GET", "/metrics", headers={"X-Forwarded-For": "198.51.100.7"})
    assert status == 401 and b"kintsugi_incidents" not in body
    status, body = send(server, "GET", "/metrics", headers={"X-Forwarded-For": "198.51.100.7",
                                                             "Authorization": "Bearer scrape-token"})
    assert status == 200 and b"kintsugi_incidents" in body
