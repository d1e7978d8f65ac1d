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
    """Every source flagged in this run of the workspace: the clean world has none of them."""
    return set(Incident.objects.filter(workspace=incident.workspace, run_number=incident.run_number)
               .exclude(status=S.CLOSED).values_list("source_id", flat=True)) | {incident.source_id}


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
