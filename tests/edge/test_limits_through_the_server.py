"""The body limits through the production server `make demo` runs: a 20,000-deep JSON body answers 400
and a 3 MB one 413 on the recording endpoint, and /mcp refuses the 3 MB body with 413 too."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from tests.edge.test_lockout_behind_proxies import server  # noqa: F401  (the gunicorn fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def post(url: str, body: bytes, **headers) -> int:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_deep_and_huge_bodies_through_gunicorn(server):  # noqa: F811
    ws = Workspace.objects.create(name="limits-served")
    register_agent(workspace=ws, name="far_agent", replay="http://127.0.0.1:9/replay", actor=None, reason="r",
                   via="cli")
    _, key = issue_agent_token(workspace=ws, label="t", actor=None, reason="r", via="cli")
    auth = {"Authorization": f"Bearer {key}"}
    deep = ('{"agent": "far_agent", "payload": {"a": ' + "[" * 20_000 + "]" * 20_000 + "}}").encode()
    huge = ('{"agent": "far_agent", "payload": {"a": "' + "a" * 3_000_000 + '"}}').encode()
    assert post(f"{server}/api/v1/recording/actions/", deep, **auth) == 400
    assert post(f"{server}/api/v1/recording/actions/", huge, **auth) == 413
    assert post(f"{server}/mcp", huge, Accept="application/json, text/event-stream") == 413
    assert post(f"{server}/api/v1/recording/actions/", b'{"agent": "far_agent", "payload": {}}', **auth) == 201
