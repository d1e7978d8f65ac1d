"""Shared by the edge tests: what is stored before and after a refused input (graph and Postgres), and
people and a repaired incident to refuse things to."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from provenance.graph import workspace_graph


def graph_counts(workspace: str) -> tuple[int, int]:
    """(nodes, edges) of a workspace graph; (0, 0) when it does not exist."""
    graph = workspace_graph(workspace)
    if not graph.exists():
        return 0, 0
    nodes = graph.ro_query("MATCH (n) RETURN count(n)")[0][0]
    edges = graph.ro_query("MATCH ()-[r]->() RETURN count(r)")[0][0]
    return nodes, edges


def row_counts() -> dict[str, int]:
    """Rows of every table an edge could write to."""
    from compensation.models import AuditEvent, CompensationItem
    from provenance.models import LedgerEntry, OutboxEmail, Source, Ticket, Workspace
    from repairs.models import Incident, IncidentTransition

    models = (Workspace, Source, Ticket, LedgerEntry, OutboxEmail, Incident, IncidentTransition, CompensationItem,
              AuditEvent)
    return {m.__name__: m.objects.count() for m in models}


@pytest.fixture
def people(db):
    from tests.compensation.conftest import _make_people

    return _make_people()


@pytest.fixture
def repaired(people, settings):
    from tests.compensation.conftest import repaired_incident

    incident = repaired_incident(flagger=people.lead, settings=settings)
    return SimpleNamespace(incident=incident, people=people, workspace=incident.workspace.name)
