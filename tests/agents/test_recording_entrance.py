"""The recording protocol's own entrance (kintsugi_site.recording_entrance): recording calls pass only the
lean middleware stack and reach only the recording routes; everything else is served as before."""
import json
import urllib.error
import urllib.request

import pytest

from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent

pytestmark = pytest.mark.django_db(transaction=True)


def _request(url: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def recording_key(django_user_model):
    admin = django_user_model.objects.create_superuser("entrance", "e@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="entrance")
    register_agent(workspace=ws, name="entrance_agent", replay="http://127.0.0.1:9/replay", actor=admin,
                   reason="test", via="cli")
    return issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")[1]


def test_a_recording_call_passes_no_admin_middleware_and_records(live_server, recording_key):
    status, headers, body = _request(f"{live_server.url}/api/v1/recording/actions/",
                                     {"agent": "entrance_agent", "payload": {"n": 1}}, recording_key)
    assert status == 201, body
    action = json.loads(body)["action"]
    # The admin's stack sets these on every answer it serves; the recording entrance does not run it.
    assert "Content-Security-Policy" not in headers and "X-Frame-Options" not in headers
    assert "Cookie" not in headers.get("Vary", "")
    status, _, body = _request(f"{live_server.url}/api/v1/recording/actions/{action}/finish/",
                               {"decision": {"done": True}}, recording_key)
    assert status == 200 and json.loads(body)["committed"] is True, body


def test_red_the_rest_of_the_api_still_passes_the_full_stack(live_server, recording_key):
    """The measure's red case: an answer of the full stack carries the headers the test above finds absent."""
    status, headers, _ = _request(f"{live_server.url}/api/v1/schema/")
    assert status == 200 and "X-Frame-Options" in headers


def test_the_entrance_reaches_only_the_recording_routes(live_server, recording_key):
    status, _, body = _request(f"{live_server.url}/api/v1/recording/../workspaces/", key=recording_key)
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    status, _, body = _request(f"{live_server.url}/api/v1/recording/actions/", {"agent": "entrance_agent"})
    assert status in (401, 403), body  # the recording token is the only credential it takes


def test_a_staged_call_through_the_wsgi_entrance_is_answered_by_the_lean_path(live_server, recording_key,
                                                                               monkeypatch):
    """Under WSGI too (the live server is the WSGI app) a plain staged call is answered before the
    entrance's Django stack, with the headers that stack sets; a committing finish is left to it."""
    from kintsugi_site import recording_calls

    real, answered = recording_calls.answer, []
    monkeypatch.setattr(recording_calls, "answer", lambda **kw: answered.append(real(**kw)) or answered[-1])
    status, _, body = _request(f"{live_server.url}/api/v1/recording/actions/",
                               {"agent": "entrance_agent", "payload": {"n": 2}}, recording_key)
    action = json.loads(body)["action"]
    answered.clear()
    status, headers, body = _request(f"{live_server.url}/api/v1/recording/actions/{action}/set/",
                                     {"key": "faq/2", "value": "two"}, recording_key)
    assert status == 200 and json.loads(body) == {"key": "faq/2", "written": True}
    assert answered and answered[0] is not None  # the lean path answered it
    assert headers["Content-Type"] == "application/json" and headers["Allow"] == "POST, OPTIONS"
    assert headers["X-Content-Type-Options"] == "nosniff" and "X-Frame-Options" not in headers
    answered.clear()
    status, _, body = _request(f"{live_server.url}/api/v1/recording/actions/{action}/finish/",
                               {"decision": {"done": True}}, recording_key)
    assert status == 200 and json.loads(body)["committed"] is True and answered == [None]
