from core.commands import KintsugiCommand
from provenance.recording.selectors import blast_radius
from provenance.recording.services import get_workspace


class Command(KintsugiCommand):
    help = "Show what a source touched: the actions downstream of it, in re-execution (seq) order. Read-only."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--source", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        radius = blast_radius(workspace=get_workspace(o["workspace"]), source=o["source"])
        if o["json"]:
            radius.pop("by_agent")
            radius.pop("effects_by_kind")
            self.print_json(radius)
            return
        self.stdout.write(f"{radius['source']}: {radius['size']} actions, {radius['tickets']} tickets, "
                          f"{radius['effects']} live effects, ${radius['amount_at_stake']:.2f} at stake")
        for a in radius["actions"]:
            self.stdout.write(f"  seq {a['seq']:>8g}  #{a['id']:<6} {a['agent']:<10} {a['ticket'] or ''}")
