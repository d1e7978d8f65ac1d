"""Deep and huge bodies answer 400 and 413 in the API's error shape (and 413 at /mcp), never 500, and
nothing is written."""
import asyncio
import json

import pytest
from django.test import Client

from kintsugi_site.api import parsers
from kintsugi_site.body_limit import BodyLimit
from provenance.models import Recording, Ticket, Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from tests.helpers import client_for

pytestmark = pytest.mark.django_db(transaction=True)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def desk(make_user):
    admin = make_user("limits-admin", roles=["Workspace admin"])
    api = client_for(admin)
    assert api.post("/api/v1/workspaces/", {"name": "limits", "reason": "r"}, format="json").status_code == 201
    ws = Workspace.objects.get(name="limits")
    register_agent(workspace=ws, name="far_agent", replay="http://127.0.0.1:9/replay", actor=admin, reason="r",
                   via="cli")
    _, key = issue_agent_token(workspace=ws, label="t", agents=["far_agent"], actor=admin, reason="r", via="cli")
    return ws, api, key


def post_raw(path: str, body: bytes, **headers) -> tuple[int, dict]:
    answer = Client().generic("POST", path, body, content_type="application/json", **headers)
    return answer.status_code, answer.json()


def test_a_20000_deep_body_answers_400_on_the_recording_and_ticket_endpoints(desk):
    ws, api, key = desk
    deep = ('{"agent": "far_agent", "payload": {"a": ' + nested(20_000) + "}}").encode()
    status, body = post_raw("/api/v1/recording/actions/", deep, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert status == 400 and body["error"]["code"] == "parse_error" and "nested deeper" in body["error"]["message"]
    ticket = ('{"ticket_id": "t1", "reason": "r", "body": ' + nested(20_000) + "}").encode()
    status, body = post_raw(f"/api/v1/workspaces/{ws.pk}/tickets/", ticket,
                            HTTP_AUTHORIZATION=f"Token {api._credentials['HTTP_AUTHORIZATION'].split()[1]}")
    assert status == 400 and set(body["error"]) == {"code", "message", "details"}
    assert not Recording.objects.exists() and not Ticket.objects.exists()


def test_a_3_mb_body_answers_413(desk):
    _, _, key = desk
    huge = ('{"agent": "far_agent", "payload": {"a": "' + "a" * 3_000_000 + '"}}').encode()
    status, body = post_raw("/api/v1/recording/actions/", huge, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert not Recording.objects.exists()


def test_the_depth_limit_is_exact():
    assert parsers.loads_limited(nested(parsers.MAX_JSON_DEPTH).encode()) is not None
    assert parsers.loads_limited(json.dumps({"a": [{"b": [1]}]}).encode()) == {"a": [{"b": [1]}]}
    for too_deep in (nested(parsers.MAX_JSON_DEPTH + 1), '{"a": ' * 65 + "1" + "}" * 65, nested(100_000)):
        with pytest.raises(Exception, match="nested deeper"):
            parsers.loads_limited(too_deep.encode())
    with pytest.raises(Exception, match="JSON parse error"):
        parsers.loads_limited(b'{"a": NaN}')


def run_limited(body_chunks: list[bytes], headers: list) -> tuple[int, int]:
    """The MCP endpoint's wrapper around an app that reads the whole body and answers 200."""
    read = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            read.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    messages = [{"type": "http.request", "body": c, "more_body": i < len(body_chunks) - 1}
                for i, c in enumerate(body_chunks)]
    sent = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(BodyLimit(app)({"type": "http", "headers": headers}, receive, send))
    return sent[0]["status"], sum(read)


def test_the_mcp_endpoint_refuses_a_huge_body_declared_or_chunked(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    assert run_limited([b"x" * 500], [(b"content-length", b"500")]) == (200, 500)
    assert run_limited([b"x" * 5000], [(b"content-length", b"5000")]) == (413, 0)
    status, read = run_limited([b"x" * 600, b"x" * 600, b"x" * 600], [])
    assert status == 413 and read < 1800
