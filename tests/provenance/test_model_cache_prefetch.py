"""The model client's prefetch: a block of requests fetched together asks the cache once, not once
per request, and a request the cache did not have is computed without a second look only inside
that block."""
import pytest
from pydantic import BaseModel

from provenance import llm

from provenance.graph import queries
from provenance.graph.graph import Graph

pytestmark = pytest.mark.django_db
TASK = "prefetch_echo"


class Echo(BaseModel):
    text: str


@llm.model_task(TASK, prompt_version="prefetch-echo-v1", instruction="Repeat the text.", schema=Echo)
def _echo(input: dict, facts: dict) -> dict:
    return {"text": input["text"]}


@pytest.fixture
def cache_gets(monkeypatch, fresh_model_cache):
    """How many single-key cache lookups the client has made."""
    seen = {"n": 0}
    ro_query = Graph.ro_query

    def counted(self, cypher, params=None, **kw):
        seen["n"] += cypher == queries.CACHE_GET
        return ro_query(self, cypher, params, **kw)

    monkeypatch.setattr(Graph, "ro_query", counted)
    return seen


def _requests(*texts):
    return [(TASK, {"text": t}, None) for t in texts]


def test_requests_no_cache_had_are_computed_inside_the_block_without_a_lookup_each(cache_gets):
    client = llm.get_client()
    with client.prefetched(_requests("a", "b", "c"), workspace="ws-prefetch"):
        answers = [client.complete(TASK, {"text": t}, defer=True, workspace="ws-prefetch")["text"] for t in "abc"]
    client.flush()
    assert answers == ["a", "b", "c"] and client.calls == 3 and cache_gets["n"] == 0
    # The red case: the same kind of miss outside a block asks the cache first.
    assert client.complete(TASK, {"text": "d"}, workspace="ws-prefetch")["text"] == "d"
    assert cache_gets["n"] == 1


def test_after_the_block_a_miss_it_knew_of_is_looked_up_again(cache_gets):
    client = llm.get_client()
    with client.prefetched(_requests("e"), workspace="ws-prefetch"):
        pass
    # Another process saved the answer meanwhile: this client reads it instead of computing its own.
    other = llm.ModelClient()
    other.complete(TASK, {"text": "e"}, workspace="ws-prefetch")
    before = cache_gets["n"]
    assert client.complete(TASK, {"text": "e"}, workspace="ws-prefetch")["text"] == "e"
    assert cache_gets["n"] == before + 1 and client.calls == 0 and client.hits == 1


def test_answers_the_cache_had_come_from_the_prefetch(cache_gets):
    llm.ModelClient().complete(TASK, {"text": "f"}, workspace="ws-prefetch")
    client = llm.get_client()
    with client.prefetched(_requests("f", "g"), workspace="ws-prefetch"):
        assert client.complete(TASK, {"text": "f"}, workspace="ws-prefetch")["text"] == "f"
        assert client.complete(TASK, {"text": "g"}, workspace="ws-prefetch")["text"] == "g"
    assert (client.hits, client.calls) == (1, 1)
