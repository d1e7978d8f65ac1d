"""Recordings of one workspace side by side: each reads its snapshot, takes its place in the order at
commit, and a desk recorded so repairs to exactly its clean run."""
import threading

import pytest
from django.db import connection

from provenance.agents import agent
from provenance.desk.scenario import PAGES, POISONED_PAGE
from provenance.graph.fact_index import FactIndex
from provenance.graph.graph import workspace_graph
from provenance.recording.live import SnapshotRecording
from provenance.models import Workspace
from provenance.recording.recorder import GraphRecorder
from provenance.recording.selectors import export_state, fact_history
from provenance.recording.services import record_root
from tests.live.helpers import concurrent_desk, late_page_schedule, schedule
from tests.helpers import recording_api, repair

pytestmark = pytest.mark.django_db(transaction=True)


@agent("live_bump")
def live_bump(rec, payload: dict) -> dict:
    seen = rec.get("live/counter", 0)
    rec.set("live/counter", seen + payload["by"])
    return {"saw": seen}


@agent("live_peek")
def live_peek(rec, payload: dict) -> dict:
    return {"saw": rec.get("live/counter", 0)}


def _hidden_rerun_reads(workspace: str, action_id: int, *, hidden: bool):
    """What a re-execution of the action reads of live/counter, with or without its snapshot's bounds."""
    graph = workspace_graph(workspace)
    row = graph.ro_query("MATCH (a:Action {id: $id}) RETURN a.seq, a.snap, a.rstart", {"id": action_id})[0]
    session = GraphRecorder(graph=graph, workspace=workspace, sources={}, effects="sandbox")
    bounds = (row[1], row[2]) if hidden and row[1] is not None else None
    # A reader at the action's place in the order, with its snapshot (a reader other than the writer:
    # the action's own version is the one it wrote, not one it read).
    record = session.execute("live_peek", {}, id=10_000 + action_id, seq=row[0], parent=None, hidden=bounds)
    return record.decision["saw"]


def test_two_open_recordings_writing_one_key_each_read_the_snapshot_and_the_last_committer_wins():
    ws = Workspace.objects.create(name="same-key")
    record_root(workspace="same-key", agent="live_bump", payload={"by": 1})
    first, second = SnapshotRecording(ws), SnapshotRecording(ws)
    first.run("live_bump", {"by": 10})
    second.run("live_bump", {"by": 100})
    [late] = second.commit()  # committed first, opened second: nothing hidden from it
    [early] = first.commit()
    history = fact_history(workspace="same-key", key="live/counter")
    assert [(v["value"], v["version"]) for v in history] == [(1, 1), (101, 2), (11, 3)]
    assert export_state(workspace="same-key")["facts"] == [{"key": "live/counter", "value": 11}]
    graph = workspace_graph("same-key")
    decisions = dict(graph.ro_query("MATCH (a:Action) RETURN a.id, a.decision"))
    assert decisions[late] == decisions[early] == '{"saw": 1}'
    assert late < early and Workspace.objects.get(pk=ws.pk).action_count == 3
    # A re-execution reads what the original read: the snapshot, not the version committed between.
    assert _hidden_rerun_reads("same-key", early, hidden=True) == 1
    # Red: resolved without the snapshot's bounds, it would read the other recording's write.
    assert _hidden_rerun_reads("same-key", early, hidden=False) == 101


def test_the_fact_index_hides_the_seqs_a_snapshot_lacked_but_not_the_readers_own_recording():
    from provenance.graph.fact_index import FactVersion

    index = FactIndex()
    for fid, seq, writer in ((1, 1.0, 1), (2, 5.0, 5), (3, 7.0, 7)):
        index.add_version(FactVersion(fid, "k", fid, fid, seq, True, writer))
    assert index.resolve("k", 8.0, 8).id == 3
    assert index.resolve("k", 8.0, 8, (2.0, 7.0)).id == 3  # its own recording's earlier write
    assert index.resolve("k", 7.5, 8, (2.0, 8.0)).id == 1  # 5 and 7 were committed beside it


def test_record_root_in_threads_all_land_none_refused():
    Workspace.objects.create(name="threads")
    barrier, results = threading.Barrier(6), []

    def run(n):
        barrier.wait()
        try:
            results.append(record_root(workspace="threads", agent="live_bump", payload={"by": n}))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [1] * 6
    ids = sorted(i for r in results for i in r)
    assert ids == list(range(1, 7)) and Workspace.objects.get(name="threads").action_count == 6
    versions = [v["version"] for v in fact_history(workspace="threads", key="live/counter")]
    assert versions == list(range(1, 7))


def test_the_scheduler_interleaves_and_is_seeded():
    events = schedule(30, seed=3, width=5)
    assert schedule(30, seed=3, width=5) == events
    opened_before_commit = [i for i, (kind, _) in enumerate(events) if kind == "open"]
    commits = [i for kind, i in events if kind == "commit"]
    assert sorted(commits) == list(range(30)) and commits != sorted(commits)
    assert len(opened_before_commit) == 30


@pytest.mark.parametrize("order_seed", [1, 2, 3])
def test_a_desk_recorded_by_concurrent_agents_repairs_to_its_clean_run(order_seed):
    concurrent_desk("conc", tickets=120, seed=7, order_seed=order_seed)
    concurrent_desk("conc-clean", tickets=120, seed=7, order_seed=order_seed, exclude_source=POISONED_PAGE)
    hidden = workspace_graph("conc").ro_query("MATCH (a:Action) WHERE a.snap IS NOT NULL RETURN count(a)")[0][0]
    assert hidden > 0  # the schedule did record side by side
    incident = repair("conc", POISONED_PAGE)
    assert incident.status == "repaired", incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert export_state(workspace="conc") == export_state(workspace="conc-clean")


def _late_policy_desks():
    """Tickets that read the poisoned page's VIP rules while the refund policy was being recorded
    beside them: they decided without the policy, and a repair must re-run them without it too."""
    events = late_page_schedule(len(PAGES) + 120, page=0, opened=30)
    assert PAGES[0][0] == "acme/refund-policy"
    concurrent_desk("conc", tickets=120, seed=7, order_seed=0, events=events)
    concurrent_desk("conc-clean", tickets=120, seed=7, order_seed=0, events=events, exclude_source=POISONED_PAGE)


def test_a_repair_rereads_the_snapshot_its_originals_read():
    _late_policy_desks()
    incident = repair("conc", POISONED_PAGE)
    assert incident.status == "repaired", incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert export_state(workspace="conc") == export_state(workspace="conc-clean")


def test_red_a_rerun_read_against_the_wrong_snapshot_does_not_repair_to_the_clean_run(monkeypatch):
    _late_policy_desks()
    original = FactIndex.resolve
    monkeypatch.setattr(FactIndex, "resolve", lambda self, key, seq, reader, hidden=None:
                        original(self, key, seq, reader))  # every re-run reads up to its seq instead
    incident = repair("conc", POISONED_PAGE)
    assert export_state(workspace="conc") != export_state(workspace="conc-clean")
    assert incident.status != "repaired" or incident.verification is not None


def test_http_recordings_open_side_by_side_each_on_its_snapshot(django_user_model):
    """Two agents over HTTP write the same key in recordings open at once: neither is refused, each reads
    the snapshot plus its own writes, and the last to commit is current."""
    from provenance.models import Recording

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="http-side")
    client = recording_api(ws, ("http_faq_writer", "http_faq_reader"), actor=admin)

    def post(path, body, status=200):
        response = client.post(f"/api/v1/recording/actions/{path}", body, format="json")
        assert response.status_code == status, response.content
        return response.json()

    def writer(answer):
        a = post("", {"agent": "http_faq_writer", "payload": {"topic": "t", "answer": answer}}, 201)["action"]
        return a

    a, b = writer("from a"), writer("from b")  # both open: nothing waits for the other
    assert Recording.objects.filter(status="open").count() == 2
    for action, answer in ((a, "from a"), (b, "from b")):
        post(f"{action}/set/", {"key": "faq/t", "value": answer})
        post(f"{action}/handoff/", {"agent": "http_faq_reader", "payload": {"topic": "t"}})
        post(f"{action}/finish/", {"decision": {"topic": "t"}})
    children = {}
    for action in (a, b):
        children[action] = post("", {"agent": "http_faq_reader", "parent": action}, 201)["action"]
    assert len({a, b, *children.values()}) == 4  # provisional ids never shared
    assert post(f"{children[b]}/get/", {"key": "faq/t"})["value"] == "from b"
    first = post(f"{children[b]}/finish/", {"decision": {"has_answer": True}})
    # a's reader reads a's write, not b's, though b committed meanwhile
    assert post(f"{children[a]}/get/", {"key": "faq/t"})["value"] == "from a"
    second = post(f"{children[a]}/finish/", {"decision": {"has_answer": True}})
    assert first["committed"] and second["committed"]
    # b kept the ids it was told (nothing committed over them); a, committed after, is numbered after it
    assert first["actions"] == [b, children[b]] and second["actions"] == [children[b] + 1, children[b] + 2]
    history = fact_history(workspace="http-side", key="faq/t")
    assert [v["value"] for v in history] == ["from b", "from a"]
    assert export_state(workspace="http-side")["facts"] == [{"key": "faq/t", "value": "from a"}]
    assert Workspace.objects.get(pk=ws.pk).action_count == 4
