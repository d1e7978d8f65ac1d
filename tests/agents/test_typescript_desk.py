"""The TypeScript client (clients/typescript): its own tests under node, and its example desk in a Node
process recorded against a live server, flagged through the API, repaired by a real worker through the
desk's replay endpoint, and equal to the same desk recorded without the poisoned page."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from provenance.models import Source
from provenance.recording.selectors import export_state
from repairs.models import Incident
from tests.agents.conftest import RemoteDesk
from tests.helpers import wait_until_finished

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
NODE = shutil.which("node") or "node"
POISONED = "partner-blog/vip-update"


class NodeDesk(RemoteDesk):
    """clients/typescript/examples/desk.mjs in its own process group; `start` waits for its JSON line."""

    def start(self, *, exclude_source: str | None = None, timeout: float = 180) -> dict:
        args = [NODE, str(CLIENT / "examples" / "desk.mjs"), "--base-url", self.base_url, "--token", self.token,
                "--workspace", self.workspace, "--replay-port", str(self.port), "--effects-log", str(self.effects_log)]
        if exclude_source:
            args += ["--exclude-source", exclude_source]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready and (line := self.proc.stdout.readline()):
                return json.loads(line)
            if self.proc.poll() is not None:
                raise AssertionError(f"node desk exited: {self.proc.stderr.read().decode()[-2000:]}")
        raise AssertionError("node desk printed nothing in time")


@pytest.fixture
def node_desk(live_server, admin_token, tmp_path):
    desks: list[NodeDesk] = []

    def make(workspace: str) -> NodeDesk:
        desk = NodeDesk(live_server.url, admin_token, workspace, tmp_path / f"{workspace}-effects.jsonl")
        desks.append(desk)
        return desk

    yield make
    for desk in desks:
        desk.stop()


def _post(url: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_typescript_client_tests_pass_under_node():
    result = subprocess.run([NODE, "--test", "clients/typescript/test/"], cwd=ROOT, capture_output=True, text=True,
                            timeout=180, env={k: v for k, v in os.environ.items() if not k.startswith("NODE_")})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass 0" not in result.stdout


def test_node_verifies_what_kintsugi_signs_and_refuses_it_changed():
    from provenance.recording.replay import sign

    body, secret, timestamp = '{"agent": "ts_triage", "purpose": "repair", "replay_id": "r1"}', "krs_abc", 1_700_000_000
    script = ("import('./clients/typescript/src/index.js').then(({ verify }) => {"
              " const [body, secret, ts, sig] = process.argv.slice(1);"
              " const headers = { 'x-kintsugi-timestamp': ts, 'x-kintsugi-signature': sig };"
              " verify(secret, headers, body, { now: Number(ts) });"
              " try { verify(secret, headers, body + ' ', { now: Number(ts) }); process.exit(3); } catch { } })")
    signature = sign(body.encode(), secret, timestamp)
    result = subprocess.run([NODE, "-e", script, body, secret, str(timestamp), signature], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    forged = subprocess.run([NODE, "-e", script, body, "krs_other", str(timestamp), signature], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert forged.returncode != 0 and "bad signature" in forged.stderr


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_typescript_desk_repairs_through_its_replay_endpoint_to_the_clean_recording(
        node_desk, admin_token, live_server, celery_worker_process):
    poisoned = node_desk("ts-desk")
    line = poisoned.start()
    assert line["actions"] == 3 + 4 + 3 and line["source"] == POISONED  # research, triage, three refunds
    assert line["signed"] is True  # each registration's replay secret, taken by the desk
    performed = poisoned.performed()
    assert sorted((e["ticket"], e["amount"]) for e in performed) == [("t01", 12000), ("t02", 7500), ("t03", 6000)]

    clean = node_desk("ts-clean")
    assert clean.start(exclude_source=POISONED)["actions"] == 2 + 4 + 2
    clean.stop()
    assert export_state(workspace="ts-desk") != export_state(workspace="ts-clean")  # the poisoned refund of t02

    # A replay request kintsugi did not sign is refused over HTTP before the desk runs anything.
    forged = json.dumps({"workspace": "ts-desk", "agent": "ts_triage", "action": 4, "payload": {"ticket": "t02"},
                         "mode": "replay", "purpose": "repair", "replay_id": "forged-1", "base_url": "http://127.0.0.1:9",
                         "token": "x"}).encode()
    for headers in ({}, {"X-Kintsugi-Timestamp": str(int(time.time())), "X-Kintsugi-Signature": "v1=" + "0" * 64}):
        request = urllib.request.Request(f"http://127.0.0.1:{poisoned.port}/replay", data=forged, method="POST",
                                         headers={"Content-Type": "application/json", **headers})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401

    source = Source.objects.get(workspace__name="ts-desk", source_id=POISONED)
    status, body = _post(f"{live_server.url}/api/v1/sources/{source.pk}/flag/", admin_token,
                         {"reason": "the partner blog invented a VIP rule"})
    assert status == 201, body
    incident = Incident.objects.get(pk=body["id"])
    wait_until_finished(incident, timeout=240)
    incident.refresh_from_db()
    assert incident.status == "repaired", incident.error
    # The page, the two VIP triages (t02's decision changes, t01's does not), t02's refund and t01's.
    assert incident.blast_radius == 5
    assert incident.counts == {"poisoned": 1, "rerun_changed": 1, "rerun_same": 1, "superseded": 1, "skipped": 1,
                               "new": 0}
    v = incident.verification
    assert (v["facts"], v["decisions"], v["effects"]) == (0, 0, 0)
    assert sorted((e.kind, e.ticket) for e in incident.effects.filter(role="invalidated")) == [("refund", "t02")]
    assert export_state(workspace="ts-desk") == export_state(workspace="ts-clean")
    # The re-runs replayed in the Node process (signed: it refuses anything else), and the effects they made
    # were held, never performed.
    assert poisoned.performed() == performed


@pytest.mark.django_db(transaction=True)
def test_typescript_bench_records_n_actions_and_prints_one_json_line(live_server, admin_token):
    from provenance.graph import queries
    from provenance.graph.graph import workspace_graph

    status, ws = _post(f"{live_server.url}/api/v1/workspaces/", admin_token, {"name": "ts-bench", "reason": "bench"})
    assert status == 201, ws
    base = f"{live_server.url}/api/v1/workspaces/{ws['id']}"
    status, _ = _post(f"{base}/agents/", admin_token,
                      {"name": "bench_ts", "replay_url": "http://127.0.0.1:9/replay", "reason": "bench"})
    assert status == 200
    status, issued = _post(f"{base}/agent-tokens/", admin_token, {"label": "bench", "reason": "bench"})
    assert status == 201
    env = {"PATH": os.environ["PATH"], "KINTSUGI_URL": live_server.url, "KINTSUGI_TOKEN": issued["key"],
           "KINTSUGI_AGENT": "bench_ts"}
    result = subprocess.run([NODE, str(CLIENT / "bench" / "record.mjs"), "5"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout)
    assert line["ops"] == 5 and line["seconds"] > 0
    assert workspace_graph("ts-bench").ro_query(queries.ACTION_COUNT)[0][0] == 5

    refused = subprocess.run([NODE, str(CLIENT / "bench" / "record.mjs"), "5"], capture_output=True, text=True,
                             env=env | {"KINTSUGI_TOKEN": "kag_not-a-token"}, timeout=60)
    assert refused.returncode == 1 and "401" in refused.stderr and refused.stdout == ""
