from core.commands import KintsugiCommand
from provenance.progress import reporter
from provenance.recording.services import get_workspace
from repairs.models import Incident
from core.users import get_user
from repairs.what_if import what_if
from core.money import format_money, format_totals


class Command(KintsugiCommand):
    help = ("What flagging a source would do, without doing it: the repair's exact counts, the effects it "
            "would invalidate, the compensation items and money. Writes nothing but an audit event.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--source", required=True)
        parser.add_argument("--user", help="whom to attribute the look to in the audit trail")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        actor = get_user(o["user"]) if o["user"] else None
        result = what_if(workspace=workspace, source=o["source"], actor=actor, via=Incident.Via.CLI,
                         progress=reporter("what-if walk"))
        if o["json"]:
            self.print_json(result.summary())
            return
        c = result.counts
        self.stdout.write(
            f"{result.source}: blast radius {result.blast_radius}: poisoned {c['poisoned']}, re-run changed "
            f"{c['rerun_changed']}, re-run same {c['rerun_same']}, skipped {c['skipped']}, superseded "
            f"{c['superseded']}, new {c['new']}")
        self.stdout.write(f"{result.effects_invalidated} effects invalidated; {result.compensations} compensation "
                          f"items; {format_totals(result.amount_reversed)} to be reversed")
        contains = result.containment
        plural = "" if contains["facts"] == 1 else "s"
        self.stdout.write(f"{contains['facts']} fact version{plural} would be contained at the flag"
                          + (f": {', '.join(f['key'] + ' v' + str(f['version']) for f in contains['sample'][:5])}"
                             + (", ..." if contains["facts"] > 5 else "") if contains["facts"] else ""))
        for t in result.tickets_changed:
            self.stdout.write(f"  {t['ticket']}: {_decision(t['before'])} -> {_decision(t['after'])}")
        for item in result.items:
            money = f" {format_money(item['amount_cents'], item['currency'])}" if item["amount_cents"] else ""
            self.stdout.write(f"  item {item['kind']} {item['ticket']}{money}")
        self.stdout.write(f"desk fingerprint {result.fingerprint} (nothing was changed)")


def _decision(d: dict) -> str:
    return f"{d.get('choice')} ({d.get('level')})" if "choice" in d else str(d)
