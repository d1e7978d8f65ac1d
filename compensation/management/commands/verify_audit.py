import sys

from core import chains
from core.commands import KintsugiCommand
from provenance.services import get_workspace


class Command(KintsugiCommand):
    help = ("Check every audit chain (the system's and each workspace's) row by row and against its latest signed "
            "checkpoint: exit 0 when all hold (a summary line per chain), 1 naming the first broken row of each "
            "broken chain.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="check only this workspace's chain (`system`: the system chain)")
        parser.add_argument("--json", action="store_true", help="one JSON document with every chain's status")

    def handle(self, *args, **o):
        if o["workspace"]:
            ids = [None] if o["workspace"] == "system" else [get_workspace(o["workspace"]).pk]
            statuses = chains.verify_all(workspace_ids=ids)
        else:
            statuses = chains.verify_all()
        result = chains.verify_output(statuses)  # the admin's "verify the chain" page prints the same
        if o["json"]:
            self.print_json({"holds": result.holds, "chains": [s.as_dict() for s in statuses]})
        else:
            for line in result.stderr:
                sys.stderr.write(f"{line}\n")
            for line in result.stdout:
                self.stdout.write(line)
        if not result.holds:
            sys.exit(result.exit_code)
