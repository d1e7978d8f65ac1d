"""A small client for kintsugi's HTTP API: set up a workspace, record agents in your own process and
serve kintsugi's replays of them. The Python standard library only; copy it anywhere.

    client = Client("http://127.0.0.1:8000", person_token)         # onboarding, as a Workspace admin
    ws = client.ensure_workspace("desk", reason="our support desk")
    key = client.issue_agent_token(ws["id"], label="desk agents", reason="recording")

    desk = Desk(Client("http://127.0.0.1:8000", key), replay_secret=secret)  # the agent's krs_ secret
    @desk.agent("triage")
    def triage(rec, payload): ...                                  # rec.get / set / ingest / handoff / effect
    desk.run_root("triage", {"ticket": "t01", ...})                # the root and, depth first, its handoffs
    desk.serve_replays("127.0.0.1", 9100)                          # kintsugi re-runs actions here in repairs

serve_replays runs an agent only for a replay request signed with the registration's replay secret
(kintsugi_client.signing); anything else is answered 401 before any agent code runs. Its `verify` hook
sees each signed request and its headers before the agent runs (refuse a purpose you do not serve by
raising ForgedReplay), its `log` hook every request's outcome. The secret can be kept across restarts
(kintsugi_client.replay_secret); the client waits out a 429's Retry-After up to `max_wait` seconds.

An agent function is written exactly as an in-process `@agent` function of kintsugi: it gets a
recorder and the payload and returns a structured decision (a dict without floats). The recorder sends
the calls whose answer the agent does not use (set, handoff) in the background, with its next call
that needs an answer (kintsugi_client.recorder; `Client(buffer=0)` sends every call as it is made).
The protocol's batch forms are helpers too: `rec.calls([...])` / `rec.get_many(keys)` (several calls of
one action in one request) and `client.record_batch(RecordingBatch(...))` (a whole finished recording
in one request; kintsugi_client.batch).

Each thread keeps its connection to kintsugi open from request to request (kintsugi_client.connections,
which also says when a request is ever sent twice: only when kintsugi cannot have run it, or running
it twice records what running it once does).

The modules: client (Client, KintsugiError), connections (keep-alive), recorder (RemoteRecorder), desk
(Desk), batch (RecordingBatch), signing and replay_secret (replays), compensations, langgraph and agents_sdk.
"""
from __future__ import annotations

from kintsugi_client.batch import RecordingBatch
from kintsugi_client.client import Client, KintsugiError
from kintsugi_client.desk import Desk, ReplayLog, ReplayVerify
from kintsugi_client.recorder import RemoteRecorder
from kintsugi_client.signing import ForgedReplay

__all__ = ["Client", "Desk", "ForgedReplay", "KintsugiError", "RecordingBatch", "RemoteRecorder", "ReplayLog",
           "ReplayVerify"]
