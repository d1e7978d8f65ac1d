"""Provisional action ids of recordings over HTTP (and MCP, which records through the same services):
never handed out twice in a workspace, whatever became of the recording that had one, and numbered from
a counter on the workspace's row, not from a scan of every recording it ever had."""
from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from provenance.recording import batch, remote
from provenance.graph.graph import workspace_graph
from provenance.models import AgentToken, Recording, Workspace
from provenance.recording.services import record_root
from tests.agents.test_recording_batch import READER, WRITER
from tests.agents.test_recording_protocol import faq_over_http, post, setup  # noqa: F401  (setup: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _open_root(client, topic: str) -> int:
    return post(client, "", {"agent": "http_faq_writer", "payload": {"topic": topic, "answer": "a"}}, 201)["action"]


def test_ids_are_never_handed_out_again_whatever_became_of_their_recording(setup, settings):
    ws, client = setup("never-twice")
    handed: list[int] = []

    committed = _open_root(client, "committed")
    post(client, f"{committed}/set/", {"key": "faq/c", "value": 1})
    post(client, f"{committed}/handoff/", {"agent": "http_faq_reader", "payload": {"topic": "c"}})
    post(client, f"{committed}/finish/", {"decision": {"topic": "c"}})
    child = post(client, "", {"agent": "http_faq_reader", "parent": committed}, 201)["action"]
    assert post(client, f"{child}/finish/", {"decision": {"has_answer": True}})["committed"] is True
    handed += [committed, child]

    abandoned = _open_root(client, "abandoned")
    post(client, f"{abandoned}/abandon/", {"reason": "agent crashed"})
    handed.append(abandoned)

    expired = _open_root(client, "expired")
    Recording.objects.filter(first_action=expired).update(
        touched_at=timezone.now() - timedelta(seconds=settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS + 1))
    handed.append(expired)
    still_open = _open_root(client, "open")  # expires the idle one
    assert Recording.objects.get(first_action=expired).status == "expired"
    handed.append(still_open)

    # A whole recording in one request numbers above the open one, and its ids are taken too.
    response = client.post("/api/v1/recording/batch/", {"actions": [
        {"agent": "http_faq_writer", "payload": {"topic": "returns"}, "parent": None, "calls": WRITER},
        {"agent": "http_faq_reader", "parent": 0, "calls": READER}]}, format="json")
    assert response.status_code == 201, response.content
    handed += response.json()["actions"]

    # The graph replaced (a desk run starts its ids again): what recordings were handed stays taken.
    workspace_graph(ws.name).delete()
    handed.append(_open_root(client, "replaced"))

    # In-process recordings move the graph's ids; the next HTTP root numbers above those as well.
    import tests.agents_example  # noqa: F401  (faq_writer in-process)

    in_process = record_root(workspace=ws.name, agent="faq_writer",
                             payload={"topic": "local", "answer": "b", "valid_from": "2026-01-01"})
    last = _open_root(client, "last")
    handed.append(last)
    assert last > max(in_process)

    assert len(set(handed)) == len(handed), handed
    assert handed == sorted(handed)
    ws.refresh_from_db()
    assert ws.next_provisional_action == last + 1
    for gone in (abandoned, expired):
        post(client, f"{gone}/set/", {"key": "k", "value": 1}, 409)  # still named to its own recording


def test_a_stale_copy_of_the_workspace_saved_whole_does_not_move_the_counter_back(setup):
    """An admin page (or any code) that saves a Workspace it read before ids were handed out must not
    make them available again."""
    ws, client = setup("stale-save")
    stale = Workspace.objects.get(pk=ws.pk)
    first = _open_root(client, "first")
    stale.save()  # every field, as the admin's change form saves it
    second = _open_root(client, "second")
    assert second > first
    assert Workspace.objects.get(pk=ws.pk).next_provisional_action == second + 1


def test_opening_a_root_reads_no_recording_to_number_it(setup):
    """The next provisional id comes from the workspace's row: opening a root costs the same with one
    recording behind it or a hundred thousand (bench agents times both)."""
    ws, client = setup("no-scan")
    faq_over_http(client, topic="before")  # a committed recording, a row the old numbering read
    with CaptureQueriesContext(connection) as queries:
        opened = _open_root(client, "now")
    # Reading a recording's JSON for next_action, or any aggregate over the workspace's recordings.
    numbering = [q["sql"] for q in queries.captured_queries
                 if re.search(r"\"provenance_recording\"\.\"state\"\s*->>?\s*'next_action'", q["sql"])
                 or re.search(r"\b(MAX|COUNT|SUM)\(.*FROM \"provenance_recording\"", q["sql"], re.IGNORECASE)]
    assert numbering == [], "\n".join(numbering)
    assert opened == Workspace.objects.get(pk=ws.pk).next_provisional_action - 1


def test_roots_opened_from_many_threads_at_once_get_distinct_ids(setup):
    ws, client = setup("threads")
    token = AgentToken.objects.select_related("workspace").get(workspace=ws)
    threads, per_thread = 6, 4
    opened: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def open_roots(n: int) -> None:
        try:
            start.wait(30)
            for i in range(per_thread):
                if n == 0 and i == per_thread - 1:
                    # A whole recording in one request among them: its ids come from the same counter.
                    done = batch.record(token=token, actions=[
                        {"agent": "http_faq_writer", "payload": {"topic": f"b{n}"}, "parent": None, "calls": WRITER},
                        {"agent": "http_faq_reader", "parent": 0, "calls": READER}])
                    opened.extend(done["actions"])
                    continue
                answer = remote.open_action(token=token, agent="http_faq_writer", payload={"topic": f"t{n}.{i}"})
                opened.append(answer["action"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    pool = [threading.Thread(target=open_roots, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    start.wait(30)
    for t in pool:
        t.join(120)
    assert not errors, errors
    assert len(opened) == threads * per_thread + 1
    assert len(set(opened)) == len(opened), sorted(opened)
    assert Workspace.objects.get(pk=ws.pk).next_provisional_action == max(opened) + 1
