from core.commands import KintsugiCommand
from provenance.recording.services import get_workspace
from repairs.suspicious import suspicious_sources


class Command(KintsugiCommand):
    help = ("Rank the workspace's sources worth a lead's look, best first, each with plain reasons. "
            "Read-only: nothing is flagged.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        ranked = suspicious_sources(workspace=workspace)
        if o["json"]:
            self.print_json({"workspace": workspace.name, "sources": [s.to_json() for s in ranked]})
            return
        for i, s in enumerate(ranked, start=1):
            self.stdout.write(f"{i}. {s.source} (score {s.score:.2f})")
            for reason in s.reasons:
                self.stdout.write(f"     - {reason}")
