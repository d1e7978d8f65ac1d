from core.commands import KintsugiCommand
from provenance.progress import reporter
from provenance.recording.services import desk_run


class Command(KintsugiCommand):
    help = "Record one run of the support desk into a workspace (canonical scenario unless --tickets)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--tickets", type=int)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--exclude-source", action="append", help="repeatable: record as if the page never existed")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        progress = reporter("recording") if (o["tickets"] or 0) >= 200 else None
        kwargs = {"progress": progress} if progress else {}
        summary = desk_run(workspace=o["workspace"], tickets=o["tickets"], seed=o["seed"],
                           exclude_source=o["exclude_source"], reason="desk_run command", **kwargs)
        if o["json"]:
            self.print_json(summary)
        else:
            self.stdout.write(
                f"{summary['workspace']}: {summary['actions']} actions, {summary['tickets']} tickets, "
                f"{summary['tickets_read_vip_rules']} read vip_rules, {summary['effects']} effects, "
                f"refunds ${summary['refund_total']:.2f} (${summary['vip_rules_refund_total']:.2f} on vip_rules tickets)")
