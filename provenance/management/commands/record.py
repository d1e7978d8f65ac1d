from core.commands import KintsugiCommand
from provenance.recording.services import record_root


class Command(KintsugiCommand):
    help = "Run one root action of a registered agent (and its handoffs) and print the recorded action ids."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--agent", required=True)
        parser.add_argument("--payload", required=True, help="a JSON object")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        ids = record_root(workspace=o["workspace"], agent=o["agent"], payload=o["payload"])
        if o["json"]:
            self.print_json({"workspace": o["workspace"], "actions": ids})
        else:
            self.stdout.write(" ".join(str(i) for i in ids))
