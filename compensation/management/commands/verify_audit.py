import sys

from compensation.signing_lag import stale_unsigned
from core.audit import verification
from core.commands import KintsugiCommand
from provenance.recording.services import get_workspace


class Command(KintsugiCommand):
    help = ("Check every audit chain (the system's and each workspace's) row by row and against its latest signed "
            "checkpoint, and the checkpoint log against its anchor, vanished workspaces and the business rows against "
            "the latest checkpoint's counts: exit 0 when all hold (a summary line per chain), 1 naming the first "
            "broken row of each broken chain and each problem, or when rows stay unsigned past "
            "KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="check only this workspace's chain (`system`: the system chain)")
        parser.add_argument("--json", action="store_true", help="one JSON document with every chain's status")

    def handle(self, *args, **o):
        if o["workspace"]:
            ids = [None] if o["workspace"] == "system" else [get_workspace(o["workspace"]).pk]
            statuses = verification.verify_all(workspace_ids=ids)
        else:
            statuses = verification.verify_all()
        # The checkpoint log's chain and anchor, vanished workspaces and the business rows' counts are
        # the whole record's, asked whichever chains were named.
        problems = verification.record_problems(statuses)
        result = verification.verify_output(statuses, problems)  # the admin's "verify the chain" page prints the same
        unsigned = stale_unsigned(statuses)
        if o["json"]:
            self.print_json({"holds": result.holds and not unsigned, "chains": [s.as_dict() for s in statuses],
                             "problems": problems, "unsigned_too_long": unsigned})
        else:
            for line in result.stderr + [f"unsigned too long: {u}" for u in unsigned]:
                sys.stderr.write(f"{line}\n")
            for line in result.stdout:
                self.stdout.write(line)
        if not result.holds:
            sys.exit(result.exit_code)
        if unsigned:
            sys.exit(1)
