"""The recorder's edge (CLI `desk_run`/`record`, provenance.recording.services): bad names, sizes, money and ids are
refused with exit code 2 before anything is written, graph included; a recording that fails after part
of it reached the graph leaves nothing behind."""
import time

import pytest
from django.core.management import call_command

from provenance.recording import recorder
from provenance.agents import agent
from provenance.recording.services import desk_run, record_root
from provenance.validation import InvalidInput
from tests.helpers import graph_counts, row_counts

pytestmark = pytest.mark.django_db

TICKET = {"ticket": "tneg", "customer": "N", "email": "n@example.com", "subject": "refund",
          "body": "Refund me please", "amount_cents": 1000, "currency": "USD", "tier": "standard",
          "payment_reference": "x"}


def _exit_code(*args) -> tuple[int, str]:
    import io

    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command(*args, stderr=err)
    return exited.value.code, err.getvalue()


@pytest.mark.parametrize("name", ["acc_e:baseline", "llm_cache", "x_baseline", "a" * 65, "bad\x00name", "",
                                  "has space", "-leading"])
def test_desk_run_refuses_a_workspace_name_that_is_not_a_plain_slug(name):
    before = row_counts(), graph_counts(name)  # `llm_cache` names the model cache: it must stay as it is
    code, err = _exit_code("desk_run", f"--workspace={name}", "--json")
    assert code == 2 and err.startswith("error: workspace") and err.count("\n") == 1
    assert (row_counts(), graph_counts(name)) == before


def test_desk_run_refuses_an_absurd_ticket_count_at_once():
    started = time.monotonic()
    code, err = _exit_code("desk_run", "--workspace", "edge_big", "--tickets", "999999999999")
    assert code == 2 and "tickets must be a whole number" in err
    assert time.monotonic() - started < 2
    assert graph_counts("edge_big") == (0, 0) and not row_counts()["Workspace"]


@pytest.fixture
def desk():
    desk_run(workspace="edge")
    return "edge"


@pytest.mark.parametrize("field, value", [
    ("amount_cents", -999999), ("amount_cents", "lots"), ("amount_cents", 10 ** 12), ("amount_cents", 12.5),
    ("currency", "dollars"), ("ticket", "t" * 100_000), ("ticket", "t\x00"), ("email", "not an address"),
    ("body", "NUL \x00 inside"),
])
def test_record_refuses_bad_ticket_fields_with_nothing_written(desk, field, value):
    import json

    before_graph, before_rows = graph_counts(desk), row_counts()
    payload = json.dumps(TICKET | {field: value})
    code, err = _exit_code("record", "--workspace", desk, "--agent", "triage", "--payload", payload, "--json")
    assert code == 2 and err.startswith("error: ") and len(err) < 300
    assert graph_counts(desk) == before_graph and row_counts() == before_rows


def test_record_refuses_an_oversized_payload(desk):
    import json

    before = graph_counts(desk)
    code, err = _exit_code("record", "--workspace", desk, "--agent", "triage", "--payload",
                           json.dumps(TICKET | {"body": "x" * 200_000}))
    assert code == 2 and "bytes" in err and graph_counts(desk) == before


# An agent whose handoff produces an invalid effect only after its parent was recorded: the failure
# comes half-way through the recording.
@agent("edge_writer")
def edge_writer(rec, payload: dict) -> dict:
    rec.set("edge/note", "written before the failure")
    rec.effect("email", amount=0, ticket=payload["ticket"], to="n@example.com", subject="s", body="b")
    rec.handoff("edge_bad_effect", {"ticket": payload["ticket"]})
    return {"ok": 1}


@agent("edge_bad_effect")
def edge_bad_effect(rec, payload: dict) -> dict:
    rec.effect("refund", amount=-5, ticket=payload["ticket"])
    return {"ok": 0}


def test_a_recording_that_fails_after_flushing_leaves_no_trace_in_the_graph(desk, monkeypatch):
    monkeypatch.setattr(recorder, "FLUSH_EVERY", 1)  # every action reaches FalkorDB before the next runs
    before_graph, before_rows = graph_counts(desk), row_counts()
    with pytest.raises(InvalidInput, match="refund amount must not be negative"):
        record_root(workspace=desk, agent="edge_writer", payload={"ticket": "tedge"})
    assert graph_counts(desk) == before_graph and row_counts() == before_rows
    # ...and the workspace still records normally afterwards, with the ids it would have had.
    ids = record_root(workspace=desk, agent="triage", payload=TICKET | {"ticket": "tok"})
    assert ids and graph_counts(desk)[0] > before_graph[0]
