"""The two-action desk the replay tests share, recorded over the API as a remote agent's client would:
`writer` ingests kb/page and writes `policy`; `reader` reads it and decides. Flagging kb/page re-runs the
writer (the page answering None), then the reader, through their replay endpoints."""
from __future__ import annotations

from rest_framework.test import APIClient

from provenance.access.onboarding import issue_agent_token


def record_writer_reader(ws, admin, *, value: str, decision: dict) -> bool:
    """Records the two actions under a fresh recording token; answers whether the reader's commit held."""
    _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def post(path: str, body: dict) -> dict:
        return api.post(f"/api/v1/recording/actions/{path}", body, format="json").json()

    a = post("", {"agent": "writer", "payload": {"source": "kb/page"}})["action"]
    post(f"{a}/ingest/", {"source": "kb/page"})
    post(f"{a}/set/", {"key": "policy", "value": value})
    post(f"{a}/finish/", {"decision": {"wrote": True}})
    b = post("", {"agent": "reader", "payload": {"ticket": "t1"}})["action"]
    post(f"{b}/get/", {"key": "policy"})
    return bool(post(f"{b}/finish/", {"decision": decision}).get("committed"))
