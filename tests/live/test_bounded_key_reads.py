"""A recording reads of a key only what can decide its reads and its next version (the newest active
version before its snapshot, and the highest version number), never the key's whole history: a key
every root writes costs a root the same at its 300th version as at its second, and resolves exactly as
the whole history does."""
from __future__ import annotations

import random

import pytest

from provenance.graph import queries, rows
from provenance.agents import agent
from provenance.graph.fact_index import FactIndex, FactVersion, KeyedFactIndex
from provenance.graph.graph import Graph, graph_name, workspace_graph
from provenance.models import Workspace
from provenance.recording.recorder import GraphRecorder
from provenance.recording.services import record_root
from repairs.queries import INVALIDATE_FACTS

KEYS = ("hot/a", "hot/b", "cold")
HOT = "hot/shared"


# --- the property: a bounded index resolves as the whole history does --------------------------------------
def _write_action(graph: Graph, aid: int, seq: float, keys: list[str], state: dict) -> None:
    """One action writing `keys` (a key twice: two versions at one seq), through the recorder's queries."""
    graph.query(queries.CREATE_ACTIONS, {"rows": [{"id": aid, "agent": "prop", "seq": seq, "root": True}]})
    facts = []
    for key in keys:
        state["fact"] += 1
        state["version"][key] = state["version"].get(key, 0) + 1
        facts.append({"id": state["fact"], "writer": aid, "key": key, "value": str(state["fact"]),
                      "version": state["version"][key], "seq": seq})
        state["facts"].append((state["fact"], key, seq, state["version"][key]))
    graph.query(queries.CREATE_FACTS, {"rows": facts})
    state["seqs"].append(seq)
    state["writers"].append(aid)


def _retire(graph: Graph, ids: list[int], state: dict) -> None:
    graph.query(INVALIDATE_FACTS, {"rows": [{"id": i, "at": "now", "incident": 1} for i in ids]})
    state["retired"].update(ids)


def _grow(graph: Graph, rng: random.Random, state: dict, steps: int) -> None:
    """Recorded actions, actions a repair slots between them (a fractional seq, the next version number:
    versions are not in seq order), and retirements: single versions or a key's newest few."""
    for _ in range(steps):
        roll = rng.random()
        live = [f for f in state["facts"] if f[0] not in state["retired"]]
        if roll < 0.55 or not state["seqs"]:
            state["action"] += 1
            _write_action(graph, state["action"], float(state["action"]),
                          rng.choices(KEYS, weights=(5, 3, 1), k=rng.randint(1, 3)), state)
        elif roll < 0.7:
            seq = rng.choice([s for s in state["seqs"] if s == int(s)]) + rng.choice((0.25, 0.5))
            if seq not in state["seqs"]:
                state["action"] += 1
                _write_action(graph, state["action"], seq, [rng.choice(KEYS)], state)
        elif roll < 0.88 and live:
            _retire(graph, [rng.choice(live)[0]], state)
        elif live:
            key = rng.choice(KEYS)
            newest = sorted((f for f in live if f[1] == key), key=lambda f: (f[2], f[3]))[-rng.randint(1, 4):]
            if newest:
                _retire(graph, [f[0] for f in newest], state)


def _compare(graph: Graph, rng: random.Random, state: dict, *, live: bool) -> tuple[list, bool]:
    """Run the same reads, writes and retirements against a bounded index and a whole-history one, on
    a snapshot chosen by `rng`. `live`: only what a recording does (reads and writes above the snapshot,
    nothing hidden, nothing retired). Returns the mismatches, and whether a whole history was read."""
    seqs = sorted(state["seqs"])
    below = rng.choice([None, rng.choice(seqs), rng.choice(seqs) + 0.1, seqs[-1] + 1])
    whole = FactIndex()
    for f in graph.ro_query(queries.LOAD_FACTS):
        if below is None or f.seq < below:
            whole.add_version(FactVersion.from_row(f))
    bounded = KeyedFactIndex(graph, below=below)
    top, own, mismatches = seqs[-1] + 1, 100_000, []
    # A live recording's readers are its own new actions, which never read after writing (their writes
    # are answered from the record); a reader that wrote a stored version is a re-execution's.
    readers = [10 * own + i for i in range(1, 6)] if live else state["writers"] + [own + i for i in range(1, 6)]
    for step in range(25):
        key, roll = rng.choice(KEYS + ("never",)), rng.random()
        if roll < 0.7:
            if live or roll < 0.35:
                seq, hidden = top + rng.randint(0, 5), None
            else:
                seq = rng.choice([rng.uniform(0, top + 2), rng.choice(seqs)])
                low = rng.uniform(0, top)
                hidden = rng.choice([None, (low, low + rng.uniform(0.1, top))])
            reader = rng.choice(readers)
            got, want = bounded.resolve(key, seq, reader, hidden), whole.resolve(key, seq, reader, hidden)
            if (got and got.id) != (want and want.id):
                mismatches.append(("resolve", step, key, seq, reader, hidden, want and want.id, got and got.id))
        elif roll < 0.9:
            got, want = bounded.next_version(key), whole.next_version(key)
            if got != want:
                mismatches.append(("next_version", step, key, want, got))
            own += 1
            seq = top + rng.randint(0, 5) if live or rng.random() < 0.5 else rng.uniform(0, top)
            writer = own if live else rng.choice(readers)
            for index in (bounded, whole):
                index.add_version(FactVersion(own, key, own, want, seq, True, writer))
        elif not live:
            both = [i for i in bounded.by_id if i in whole.by_id and whole.by_id[i].active]
            if both:
                retired = rng.choice(both)
                bounded.by_id[retired].active = whole.by_id[retired].active = False
    for key in KEYS + ("never",):
        if bounded.next_version(key) != whole.next_version(key):
            mismatches.append(("next_version", "end", key, whole.next_version(key), bounded.next_version(key)))
    return mismatches, bool(bounded._whole)


def _mismatches(seed: int) -> list:
    """Grow a random history on a few hot keys and compare the two indexes at several points of it."""
    rng = random.Random(seed)
    graph = Graph(graph_name(f"bounded-{seed}"))
    graph.delete()
    state = {"action": 0, "fact": 0, "version": {}, "facts": [], "seqs": [], "writers": [], "retired": set()}
    found = []
    try:
        for _ in range(3):
            _grow(graph, rng, state, rng.randint(5, 25))
            for live in (True, False):
                mismatches, read_whole = _compare(graph, rng, state, live=live)
                found += [(seed, live, *m) for m in mismatches]
                if live and read_whole:
                    found.append((seed, live, "a recording's reads and writes read a whole history"))
    finally:
        graph.delete()
    return found


@pytest.mark.parametrize("first", range(0, 150, 50))
def test_a_bounded_index_resolves_and_numbers_versions_as_the_whole_history_does(first):
    found = [m for seed in range(first, first + 50) for m in _mismatches(seed)]
    assert not found, found[:5]


# Wrong bounds the property must catch: the head chosen by version number (a repair slots versions
# between recorded ones, so versions are not in seq order), the next version taken from the head
# instead of the highest version, versions past the snapshot, and no fall-back to the whole history.
_BY_VERSION = """
MATCH (f:Fact) WHERE f.key IN $keys AND ($below IS NULL OR f.seq < $below)
WITH f.key AS key, max(f.version) AS top, max(CASE WHEN f.active THEN f.version END) AS head
OPTIONAL MATCH (w:Action)-[:WROTE]->(f:Fact {key: key}) WHERE f.version = head
RETURN top, f.id, key, f.value, f.version, f.seq, f.active, w.id, f.valid_from, f.valid_until, f.known_at,
       f.system_at, f.invalidated_at, f.invalidated_by, f.contained
"""
_TOP_OF_HEAD = queries.LOAD_FACT_HEADS.replace("RETURN top, f.id", "RETURN coalesce(f.version, 0), f.id")
_PAST_SNAPSHOT = queries.LOAD_FACT_HEADS.replace("AND ($below IS NULL OR f.seq < $below)", "")


@pytest.mark.parametrize("wrong", ["head by version", "next version of the head", "past the snapshot",
                                   "never the whole history"])
def test_red_a_wrong_bound_fails_the_property(wrong, monkeypatch):
    if wrong == "never the whole history":
        monkeypatch.setattr(KeyedFactIndex, "_load_whole", lambda self, key: None)
    else:
        text = {"head by version": _BY_VERSION, "next version of the head": _TOP_OF_HEAD,
                "past the snapshot": _PAST_SNAPSHOT}[wrong]
        assert text != queries.LOAD_FACT_HEADS
        monkeypatch.setattr(queries, "LOAD_FACT_HEADS", queries.Query(text, rows.FactHead))
    assert any(_mismatches(seed) for seed in range(40))


# --- a root's graph reads do not grow with a hot key's history -----------------------------------------------
@agent("hot_writer")
def hot_writer(rec, payload: dict) -> dict:
    rec.set(HOT, payload["n"])
    rec.handoff("hot_reader", {"n": payload["n"]})
    return {"n": payload["n"]}


@agent("hot_reader")
def hot_reader(rec, payload: dict) -> dict:
    return {"saw": rec.get(HOT)}


@pytest.fixture
def rows_read(monkeypatch):
    """How many rows the graph's reads answered since the last clear()."""
    counts: list[int] = []
    original = Graph.ro_query

    def counting(self, cypher, params=None):
        result = original(self, cypher, params)
        counts.append(len(result))
        return result

    monkeypatch.setattr(Graph, "ro_query", counting)
    return counts


def _hot_workspace(name: str, versions: int) -> Workspace:
    """A workspace whose hot key already has `versions` versions, recorded in one session."""
    ws = Workspace.objects.create(name=name)
    session = GraphRecorder(graph=workspace_graph(name), workspace=name, sources={}, effects="sandbox",
                               load=False)
    for n in range(versions):
        session.run_root("hot_writer", {"n": n})
    session.flush()
    return ws


def _decision_of_last_reader(name: str) -> str:
    return workspace_graph(name).ro_query(
        "MATCH (a:Action {agent: 'hot_reader'}) RETURN a.decision ORDER BY a.id DESC LIMIT 1")[0][0]


@pytest.mark.django_db(transaction=True)
def test_record_root_reads_as_many_rows_at_300_versions_of_a_key_as_at_2(rows_read):
    read = {}
    for versions in (2, 300):
        name = f"hot-{versions}"
        _hot_workspace(name, versions)
        record_root(workspace=name, agent="hot_writer", payload={"n": 1000})  # the first pays the schema
        rows_read.clear()
        record_root(workspace=name, agent="hot_writer", payload={"n": 1001})
        read[versions] = sum(rows_read)
        assert _decision_of_last_reader(name) == '{"saw": 1001}'
        # Its version is numbered after every earlier one, as on the whole history.
        top = workspace_graph(name).ro_query("MATCH (f:Fact {key: $key}) RETURN max(f.version)", {"key": HOT})
        assert top[0][0] == versions + 2
    assert read[300] == read[2] < 20, read


@pytest.mark.django_db(transaction=True)
def test_recordings_over_http_read_as_many_rows_at_300_versions_of_a_key_as_at_2(rows_read, django_user_model):
    """Call by call (a recording's snapshot) and a whole recording in one request (the graph's lock)."""
    from tests.helpers import recording_api

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pass-1234-kintsugi")
    read = {}
    for versions in (2, 300):
        ws = _hot_workspace(f"hot-http-{versions}", versions)
        client = recording_api(ws, ("hot_remote_writer", "hot_remote_reader"), actor=admin)

        def post(path, body, status=200):
            response = client.post(f"/api/v1/recording/{path}", body, format="json")
            assert response.status_code == status, response.content
            return response.json()

        writer = [{"op": "get", "key": HOT}, {"op": "set", "key": HOT, "value": "http"},
                  {"op": "handoff", "agent": "hot_remote_reader", "payload": {}}, {"op": "finish", "decision": {}}]
        reader = [{"op": "get", "key": HOT}, {"op": "finish", "decision": {}}]
        for attempt in range(2):  # the first pays the schema and the process's caches
            rows_read.clear()
            a = post("actions/", {"agent": "hot_remote_writer", "payload": {}}, 201)["action"]
            assert post(f"actions/{a}/calls/", {"calls": writer})["results"][0]["value"] in (versions - 1, "batch")
            b = post("actions/", {"agent": "hot_remote_reader", "parent": a}, 201)["action"]
            assert post(f"actions/{b}/calls/", {"calls": reader})["results"][0]["value"] == "http"
            per_call = sum(rows_read)
            rows_read.clear()
            done = post("batch/", {"actions": [
                {"agent": "hot_remote_writer", "payload": {}, "parent": None,
                 "calls": writer[:1] + [{"op": "set", "key": HOT, "value": "batch"}] + writer[2:]},
                {"agent": "hot_remote_reader", "parent": 0, "calls": reader}]}, 201)
            assert done["results"][0][0]["value"] == "http" and done["results"][1][0]["value"] == "batch"
            read[versions] = (per_call, sum(rows_read))
    assert read[300] == read[2], read
    assert max(read[300]) < 40, read
