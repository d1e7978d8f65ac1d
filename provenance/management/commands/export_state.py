from core.commands import KintsugiCommand
from provenance.recording.selectors import export_state
from provenance.recording.services import get_workspace


class Command(KintsugiCommand):
    help = "Print a workspace's current state: active facts, standing decisions, live effects (sorted)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        state = export_state(workspace=get_workspace(o["workspace"]).name)
        if o["json"]:
            self.print_json(state)
            return
        for f in state["facts"]:
            self.stdout.write(f"fact {f['key']} = {f['value']!r}")
        for d in state["decisions"]:
            self.stdout.write(f"decision {d['ticket']}: {d['choice']} ({d['level']})")
        for e in state["effects"]:
            self.stdout.write(f"effect {e['kind']} {e['ticket']} {e['amount_cents'] / 100:.2f}")
