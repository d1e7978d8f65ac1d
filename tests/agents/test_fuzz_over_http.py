"""The repair fuzzer over HTTP: fuzz desks set up and recorded through the API by kintsugi_client against a
live server, their agents remote ones whose replay endpoint kintsugi_client serves with the fuzz
harness's interpreter. The repair re-runs them there, and its state must equal the reference
interpreter's clean run, as for the same desk recorded in-process; both verifications must agree.
`python -m bench fuzz --http` runs it long."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from bench.fuzzdesk import programs, reference, remote
from provenance.graph.graph import workspace_graph
from provenance.models import Recording
from tests.helpers import flagger

pytestmark = pytest.mark.django_db(transaction=True)
KEPT = sorted((Path(__file__).parents[1] / "repairs" / "fuzz_desks").glob("*.json"))
# Its flags change it; two of its roots are recorded beside each other and it pays with a declared kind.
CHANGED = Path(__file__).parents[1] / "repairs" / "fuzz_desks" / "beside_declared_several.json"


@pytest.fixture
def admin(live_server, admin_token):
    from kintsugi_client import Client

    return Client(live_server.url, admin_token)


def test_a_kept_desk_is_recorded_over_http_and_repaired_through_its_replay_endpoint(admin):
    """What makes the check an HTTP one: the desk is recorded as recordings of the protocol, its actions
    are remote agents', and the repair and the whole-desk replay both call their replay endpoint. The
    recording itself reads as the reference's poisoned run: the root recorded beside the next one did
    not see its writes, and the declared kind's effects are there."""
    desk = json.loads(CHANGED.read_text())
    assert reference.run(desk, clean=False) != reference.run(desk, clean=True)  # the flags change something
    assert {"concurrent recordings", "declared effect kind", "several flagged sources"} <= programs.shapes(desk)
    calls: list[dict] = []
    with remote.served(admin, desk) as served:
        ws = served.record()
        assert Recording.objects.filter(workspace=ws, status="committed").count() == len(desk["roots"])
        assert remote.harness.state(ws) == reference.run(desk, clean=False)
        assert [k["name"] for k in admin.request("GET", f"/api/v1/workspaces/{ws.pk}/effect-kinds/")] == ["send_money"]
        agents = {a for (a,) in workspace_graph(ws.name).ro_query("MATCH (a:Action) RETURN DISTINCT a.agent")}
        assert agents and all(a.startswith("fuzz_remote_") for a in agents)
        served.agents.replay = _logged(served.agents.replay, calls)
        incidents = remote.harness.repair(ws, desk, actor=flagger())
        found = remote.harness.differences(desk, ws, incidents) + remote.harness.verifications(incidents)
    assert not found, "\n".join(found)
    assert {c["purpose"] for c in calls} == {"repair", "verification"}
    assert all(i.verification["replay_calls"] > 0 for i in incidents if i.verification["set_size"])


def _logged(replay, calls: list):
    def logging(request, **kw):
        calls.append(request)
        return replay(request, **kw)
    return logging


@pytest.mark.parametrize("path", KEPT, ids=[p.stem for p in KEPT])
def test_a_kept_counterexample_repairs_to_the_reference_over_http(admin, path):
    found = remote.check(json.loads(path.read_text()), admin=admin, actor=flagger())
    assert not found, "\n".join(found)


# Bounded: each example is a workspace made through the API, its recording and its repair's replays over
# loopback HTTP (about two seconds); `python -m bench fuzz --http --minutes N` runs it long.
@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(desk=programs.desks(max_roots=4, max_flagged=2))
def test_generated_desks_repair_over_http_to_the_reference_clean_run(admin, desk):
    found = remote.check(desk, admin=admin, actor=flagger())
    assert not found, "\n".join(found) + "\n" + json.dumps(desk)


def test_an_agent_that_reads_its_own_copy_of_the_sources_is_caught_over_http(admin, monkeypatch):
    """Red: remote agents that take a source's text from a copy of their own, never asking kintsugi, keep
    the poison through the repair (nothing recorded says they read it). Their replays agree with their
    recording, so both verifications find the repair clean; the reference's clean run does not."""
    from kintsugi_client import RemoteRecorder

    desk = json.loads(CHANGED.read_text())
    monkeypatch.setattr(RemoteRecorder, "ingest", lambda self, source: desk["sources"][source])
    found = remote.check(desk, admin=admin, actor=flagger())
    assert found and not any(f.startswith("verifications") for f in found), found


def test_a_replay_answers_its_calls_without_opening_database_connections_on_their_threads(admin):
    """The replay's calls are answered on the callback server's threads, one per request: a connection
    one of them opened (the declared kind's required details, read per effect) outlived its thread."""
    import threading

    from django.db.backends.signals import connection_created

    desk = json.loads(CHANGED.read_text())
    opened_on: list[str] = []

    def opened(sender, connection, **kw):  # a request's thread of a server (the repair's own threads close theirs)
        if "process_request_thread" in threading.current_thread().name:
            opened_on.append(threading.current_thread().name)

    with remote.served(admin, desk) as served:
        ws = served.record()
        connection_created.connect(opened)
        try:
            incidents = remote.harness.repair(ws, desk, actor=flagger())
        finally:
            connection_created.disconnect(opened)
    assert all(i.status == "repaired" for i in incidents)
    assert opened_on == []
