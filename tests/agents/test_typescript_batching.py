"""The TypeScript client against kintsugi itself: set and handoff held back and sent with the next call
that needs an answer record what call by call records; a refused held-back set is thrown by the
action's next call; the batch forms are helpers."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from provenance.models import Workspace
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.recording.services import record_root
from tests.agents.test_recording_protocol import _shape

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")]

INDEX = Path(__file__).resolve().parents[2] / "clients" / "typescript" / "src" / "index.js"
PAYLOAD = {"topic": "returns", "answer": "30 days", "valid_from": "2026-01-01"}

SCRIPT = """
import { Client, Desk, RecordingBatch, RemoteRecorder } from %(index)s;
const [base, key, buffer, mode] = process.argv.slice(1);
const paths = [];
class Counting extends Client {
  request(method, path, body) { paths.push(path.split("/").at(-2)); return super.request(method, path, body); }
}
const client = new Counting(base, key, { buffer: Number(buffer) });
const payload = %(payload)s;
let out = {};
if (mode === "desk") {
  const desk = new Desk(client);
  desk.agent("http_faq_writer", async (rec, p) => {
    await rec.set(`faq/${p.topic}`, p.answer, { validFrom: p.valid_from });
    await rec.handoff("http_faq_reader", { topic: p.topic });
    return { topic: p.topic };
  });
  desk.agent("http_faq_reader", async (rec, p) => ({ has_answer: (await rec.get(`faq/${p.topic}`)) !== null }));
  out.ids = await desk.runRoot("http_faq_writer", payload);
} else if (mode === "refused") {
  const action = (await client.openAction("http_faq_writer", { topic: "t" })).action;
  const rec = new RemoteRecorder(client, action, { topic: "t" });
  await rec.set("faq/good", 1);
  await rec.set("", 2);
  for (const step of [() => rec.get("faq/good"), () => rec.finish({ done: true })]) {
    try { await step(); out.error = "none"; } catch (err) { (out.errors ??= []).push([err.status, err.details?.call, err.details?.op]); }
  }
} else {
  const batch = new RecordingBatch();
  const writer = batch.action("http_faq_writer", payload);
  writer.set("faq/returns", "30 days", { validFrom: "2026-01-01" }).handoff("http_faq_reader", { topic: "returns" })
    .finish({ topic: "returns" });
  batch.action("http_faq_reader", null, { parent: writer }).get("faq/returns").finish({ has_answer: true });
  out.batch = await client.recordBatch(batch);
}
out.paths = paths;
console.log(JSON.stringify(out));
"""


@pytest.fixture
def node(live_server, django_user_model):
    import tests.agents_example  # noqa: F401  (faq_writer / faq_reader in-process, for the comparison)

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")
    script = SCRIPT % {"index": json.dumps(INDEX.as_uri()), "payload": json.dumps(PAYLOAD)}

    def run(name: str, mode: str, *, buffer: int = 64) -> dict:
        ws = Workspace.objects.create(name=name)
        for agent in ("http_faq_writer", "http_faq_reader"):
            register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin,
                           reason="test", via="cli")
        _, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="test", via="cli")
        done = subprocess.run(["node", "--input-type=module", "-e", script, live_server.url, key, str(buffer), mode],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])
    return run


def test_a_desk_recorded_by_the_batching_typescript_client_is_the_one_recorded_call_by_call(node):
    batched, one_by_one = node("ts-batched", "desk"), node("ts-one-by-one", "desk", buffer=0)
    Workspace.objects.create(name="in-process")
    record_root(workspace="in-process", agent="faq_writer", payload=PAYLOAD)
    assert _shape("ts-batched") == _shape("ts-one-by-one") == _shape("in-process")
    assert batched["paths"] == ["actions", "calls", "actions", "get", "finish"]
    assert one_by_one["paths"] == ["actions", "set", "handoff", "finish", "actions", "get", "finish"]


def test_a_refused_held_back_set_is_thrown_by_the_next_call_and_by_every_call_after_it(node):
    out = node("ts-refused", "refused")
    assert out["errors"] == [[400, 1, "set"], [400, 1, "set"]] and "error" not in out
    assert out["paths"] == ["actions", "calls"]  # the finish never left


def test_a_whole_recording_in_one_request_through_the_typescript_helper(node):
    out = node("ts-batch", "batch")
    assert out["batch"]["committed"] and len(out["batch"]["actions"]) == 2 and out["paths"] == ["batch"]
    Workspace.objects.create(name="in-process")
    record_root(workspace="in-process", agent="faq_writer", payload=PAYLOAD)
    assert _shape("ts-batch") == _shape("in-process")
