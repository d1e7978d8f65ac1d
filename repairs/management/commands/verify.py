import json

from core.commands import KintsugiCommand
from core.users import get_user
from provenance.access import tenancy
from provenance.recording.services import get_workspace
from repairs.deep_check import latest_repair, verify_full
from repairs.models import Incident


class Command(KintsugiCommand):
    help = ("Replay a repaired desk whole without its flagged sources and diff it (the check a repair's own "
            "verification does in proportion to the damage): for one incident, or a workspace's latest repair. "
            "The result goes into the incident's verification and history; exit 1 when it differs.")

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--incident", type=int)
        which.add_argument("--workspace")
        parser.add_argument("--full", action="store_true",
                            help="the whole-desk replay (each repair already verified the radius it changed)")
        parser.add_argument("--user", help="who asks (a Support lead of the workspace); none: the operator's shell")
        parser.add_argument("--reason", default="whole-desk replay on demand")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        if not o["full"]:
            self._fail("say --full: each repair verified what it changed already; this replays the whole desk")
        actor = get_user(o["user"]) if o["user"] else None
        if o["incident"] is not None:
            incidents = Incident.objects.select_related("workspace").defer("plan", "verification")
            if actor is not None:
                incidents = tenancy.scoped(incidents, user=actor)
            incident = incidents.filter(pk=o["incident"]).first()
            if incident is None:
                self._fail(f"no incident #{o['incident']}")
        else:
            workspace = get_workspace(o["workspace"])
            if actor is not None:
                tenancy.require_visible(actor, workspace, via=Incident.Via.CLI, what=f"workspace {workspace.name!r}")
            incident = latest_repair(workspace=workspace)
            if incident is None:
                self._fail(f"workspace {workspace.name!r} has no finished repair to verify")
        result = verify_full(incident=incident, actor=actor, reason=o["reason"], via=Incident.Via.CLI)
        counts = [result[k] for k in ("facts", "decisions", "effects")]
        if o["json"]:
            self.stdout.write(json.dumps({"incident": incident.pk, **result}, indent=2, sort_keys=True))
        else:
            self.stdout.write(f"incident #{incident.pk}: whole-desk replay of {result['actions_rerun']} actions "
                              f"({result['replay_calls']} remote replay calls) in {result['seconds']} s: "
                              f"verification {counts[0]}/{counts[1]}/{counts[2]}")
        if counts != [0, 0, 0]:
            raise SystemExit(1)
