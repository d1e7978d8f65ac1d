import json
import sys
import time

from core.commands import KintsugiCommand
from provenance.progress import reporter
from provenance.recording.services import get_workspace
from repairs.models import Incident
from core.users import get_user
from repairs.services import IncidentAlreadyOpen, flag_source, incident_summary

DONE = (Incident.Status.REPAIRED, Incident.Status.FAILED, Incident.Status.CLOSED)


def ended(incident: Incident) -> bool:
    """Repaired, failed, closed, or applied whole and verified different from the clean run (needing
    attention then is an end: nothing resumes it on its own, unlike an outage past its attempts)."""
    return incident.status in DONE or (incident.status == Incident.Status.NEEDS_ATTENTION
                                       and incident.finished_at is not None)


class Command(KintsugiCommand):
    help = "Flag a source as bad: opens an incident and starts its repair in the Celery worker."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--source", required=True)
        parser.add_argument("--reason", required=True)
        parser.add_argument("--user", required=True)
        parser.add_argument("--wait", action="store_true",
                            help="block until the repair finishes; exit 1 unless it ends repaired (a repair whose "
                                 "verification differs from the clean run needs attention: exit 1)")
        parser.add_argument("--timeout", type=float, default=1800,
                            help="seconds to wait with --wait; a repair not done by then (still running, or "
                                 "blocked waiting for a retry) exits 1 and keeps going in the worker")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        actor = get_user(o["user"])
        try:
            incident = flag_source(workspace=workspace, source_id=o["source"], actor=actor, reason=o["reason"],
                                   via=Incident.Via.CLI)
        except IncidentAlreadyOpen as exc:
            self._fail(str(exc))
        done = self._wait(incident, o["timeout"]) if o["wait"] else True
        # The enqueue after commit may already have blocked it (broker down): report the row, not our copy.
        incident.refresh_from_db()
        summary = incident_summary(incident)
        if o["json"]:
            self.print_json(summary)
        else:
            said = (Incident.Status.BLOCKED, Incident.Status.NEEDS_ATTENTION)
            self.stdout.write(f"incident #{incident.pk}: {incident.status}"
                              + (f" ({incident.error})" if incident.status in said and incident.error else ""))
            for row in summary["verification"]["differences"]:
                self.stdout.write(f"  differs: {row['table']} only in the {row['side']}: "
                                  f"{json.dumps(row['row'], sort_keys=True)}")
            if incident.status in (Incident.Status.REPAIRED, Incident.Status.NEEDS_ATTENTION) and incident.finished_at:
                c, v = summary["counts"], summary["verification"]
                self.stdout.write(
                    f"blast radius {summary['blast_radius']}: poisoned {c['poisoned']}, re-run changed "
                    f"{c['rerun_changed']}, re-run same {c['rerun_same']}, skipped {c['skipped']}, superseded "
                    f"{c['superseded']}, new {c['new']}; {summary['effects_invalidated']} effects invalidated; "
                    f"verification {v['facts']}/{v['decisions']}/{v['effects']}")
        if not done:
            why = (f": {incident.error}" if incident.status == Incident.Status.BLOCKED and incident.error
                   else " (is a Celery worker running?)" if incident.status == Incident.Status.OPEN else "")
            self.stderr.write(f"gave up waiting: incident #{incident.pk} still {incident.status} after "
                              f"{o['timeout']:g}s{why}; the repair goes on in the worker")
        if o["wait"] and incident.status != Incident.Status.REPAIRED:
            sys.exit(1)

    def _wait(self, incident: Incident, timeout: float) -> bool:
        """Whether the repair ended (repaired, failed or closed) within `timeout`. A blocked one may
        still resume on its own (a retry, the outage sweep), so it is waited for like a running one."""
        progress = reporter(f"repair #{incident.pk}")
        deadline = time.monotonic() + timeout
        while True:
            incident.refresh_from_db()
            if ended(incident):
                return True
            if time.monotonic() >= deadline:
                return False
            if incident.progress_total:
                progress(min(incident.percent, 99), 100)
            time.sleep(min(0.3, max(0.0, deadline - time.monotonic())))
