"""Where a repair walk starts: the incident's graph and a session of its workspace's memory without the
sources the repair leaves out. The job, its parts, the catch-up and the what-if all walk from here; the
walk itself is repairs.engine (looked up on the module, so a benchmark can time compute_plan)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from provenance.graph.graph import Graph, workspace_graph
from provenance.progress import ProgressFn, noop
from provenance.recording.recorder import GraphRecorder
from repairs import engine
from repairs.engine import Plan

if TYPE_CHECKING:
    from repairs.models import Incident


def walk_incident(incident: Incident, *, graph: Graph | None = None, excluded: set[str] | None = None,
                  id_base: tuple | None = None, progress: ProgressFn = noop, below: float | None = None,
                  **options) -> Plan:
    """The repair walk of `incident` (an unsaved one for the what-if): its workspace's graph, a session
    without the sources the repair leaves out (numbering new nodes from `id_base`, for a part) that reads
    the memory below the walk's snapshot `below`, and compute_plan with `options` (only, mask, radius).
    The job, its parts and the what-if all walk here."""
    graph = graph if graph is not None else workspace_graph(incident.workspace.name)
    session = repair_session(incident, graph, incident.excluded_sources() if excluded is None else excluded,
                             below=below)
    if id_base is not None:
        session.number_from(*id_base)
    return engine.compute_plan(graph=graph, session=session, source=incident.source_id, incident=incident.pk,
                        progress=progress, below=below, **options)


def repair_session(incident: Incident, graph: Graph, excluded: set[str], *,
                   below: float | None = None) -> GraphRecorder:
    """The session a repair walk re-runs actions in: the workspace's memory (below the walk's snapshot)
    without the excluded sources, effects held for approval."""
    ws = incident.workspace
    return GraphRecorder(graph=graph, workspace=ws.name, effects="held", run_number=ws.run_number,
                            sources=dict(ws.sources.values_list("source_id", "content")),
                            excluded_sources=excluded, incident=incident.pk, below=below)
