"""The guard on the graphs a module's tests share (tests.helpers.shared_graphs): after each test their
version (the stamp every write through provenance.graph.graph moves, and their size) must be as the module
built them; at the module's end their whole contents must be."""
import pytest

from provenance.graph.graph import workspace_graph
from provenance.recording.services import desk_run
from tests.helpers import graph_fingerprint, graph_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_graph():
    desk_run(workspace="guarded")
    graph = workspace_graph("guarded")
    graph.stamp()
    return graph


def test_reads_leave_the_version_and_the_contents_alone(desk_graph):
    version, contents = graph_version(desk_graph.name, desk_graph.url), graph_fingerprint(desk_graph.name, desk_graph.url)
    desk_graph.ro_query("MATCH (a:Action) RETURN count(a)")
    desk_graph.stamp()
    assert graph_version(desk_graph.name, desk_graph.url) == version
    assert graph_fingerprint(desk_graph.name, desk_graph.url) == contents


def test_a_write_through_the_graph_layer_moves_the_version(desk_graph):
    version = graph_version(desk_graph.name, desk_graph.url)
    desk_graph.query("MATCH (a:Action) WITH a LIMIT 1 SET a.note = 'changed'")  # same size, new stamp
    assert graph_version(desk_graph.name, desk_graph.url) != version


def test_a_deleted_graph_has_another_version(desk_graph):
    version = graph_version(desk_graph.name, desk_graph.url)
    desk_graph.delete()
    assert graph_version(desk_graph.name, desk_graph.url) != version


def test_a_write_round_the_graph_layer_is_caught_by_the_contents(desk_graph):
    """The red case of the module-end check: a property set with the client itself moves no stamp and
    changes no size, and only the fingerprint sees it."""
    version, contents = graph_version(desk_graph.name, desk_graph.url), graph_fingerprint(desk_graph.name, desk_graph.url)
    desk_graph._graph.query("MATCH (a:Action) WITH a LIMIT 1 SET a.note = 'behind its back'")
    assert graph_version(desk_graph.name, desk_graph.url) == version
    assert graph_fingerprint(desk_graph.name, desk_graph.url) != contents
