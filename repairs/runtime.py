"""What the repair job and the workers that help it share: advisory locks, the repair's recording
session, progress reporting and the fault points the resumability tests kill workers at."""
from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

from django.db import connection

from provenance.graph import Graph
from provenance.recorder import RecordingSession
from repairs.models import Incident

S = Incident.Status


@contextmanager
def advisory_lock(namespace: int, key: int, *, wait: bool):
    with connection.cursor() as cur:
        if wait:
            cur.execute("SELECT pg_advisory_lock(%s, %s)", [namespace, key])
            got = True
        else:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
            got = cur.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])


def excluded_sources(incident: Incident) -> set[str]:
    """The sources this incident's repair leaves out: as fixed when its walk started (Incident.excluded),
    or, before that, what fix_excluded_sources would fix now."""
    if incident.excluded is not None:
        return set(incident.excluded)
    return _excluded_now(incident)


def _excluded_now(incident: Incident) -> set[str]:
    # Its own source and those of the run's incidents whose repair is in the graph (finished_at is set
    # only when a repair has been applied whole). Not the sources of overlapping incidents still open:
    # the graph keeps their effects until their own repairs, which run after this one, so a baseline
    # without them would show their blast radius as this repair's diff.
    repaired = (Incident.objects.filter(workspace_id=incident.workspace_id, run_number=incident.run_number,
                                        finished_at__isnull=False).exclude(pk=incident.pk)
                .values_list("source_id", flat=True))
    return set(repaired) | {incident.source_id}


def fix_excluded_sources(incident: Incident) -> set[str]:
    """Fix what the repair leaves out as its walk starts (under the workspace lock, so no other repair
    of the workspace finishes meanwhile); the walk, its parts and the verification all use it."""
    excluded = _excluded_now(incident)
    incident.excluded = sorted(excluded)
    Incident.objects.filter(pk=incident.pk).update(excluded=incident.excluded)
    return excluded


class Progress:
    """Progress of one phase on the incident, written at most every 0.3 s (and always at the end)."""

    def __init__(self, incident_id: int, phase: str):
        self.incident_id, self.phase, self.last = incident_id, phase, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.3:
            return
        self.last = now
        self.write(done, total)

    def write(self, done: int, total: int) -> None:
        Incident.objects.filter(pk=self.incident_id).update(phase=self.phase, progress_done=done, progress_total=total)


def fault_point(name: str) -> None:
    """Fault injection for the resumability tests: when the file named by KINTSUGI_FAULT_FILE holds
    `name`, remove it and die with SIGKILL here, as a worker killed by the OOM killer would; when it
    holds `stall:<name>`, hang here so the test can kill the whole worker from outside; when it holds
    `pause:<name>`, write `paused:<name>` there and wait until the test removes the file (it stops a
    server meanwhile)."""
    path = os.environ.get("KINTSUGI_FAULT_FILE")
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        wanted = f.read().strip()
    if wanted == f"pause:{name}":
        with open(path, "w") as f:
            f.write(f"paused:{name}")
        while os.path.exists(path):
            time.sleep(0.05)
        return
    if wanted in (name, f"stall:{name}"):
        os.remove(path)
        if wanted.startswith("stall:"):
            time.sleep(600)
        os.kill(os.getpid(), signal.SIGKILL)


def repair_session(incident: Incident, graph: Graph, excluded: set[str]) -> RecordingSession:
    """A session that re-runs actions against the workspace's memory without the flagged sources;
    effects are held for approval."""
    ws = incident.workspace
    return RecordingSession(graph=graph, workspace=ws.name, effects="held", run_number=ws.run_number,
                            sources=dict(ws.sources.values_list("source_id", "content")),
                            excluded_sources=excluded, incident=incident.pk)
