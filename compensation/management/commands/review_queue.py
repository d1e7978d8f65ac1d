from compensation.selectors import queue_rows
from kintsugi_site.money import format_money
from provenance.management.commands._common import KintsugiCommand
from provenance.services import get_workspace


class Command(KintsugiCommand):
    help = "List a workspace's compensation items, pending first (with --json, amount in integer cents)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        rows = queue_rows(workspace=get_workspace(o["workspace"]))
        if o["json"]:
            self.print_json(rows)
            return
        if not rows:
            self.stdout.write("no compensation items")
        for r in rows:
            self.stdout.write(f"#{r['id']:<6} incident {r['incident']:<5} {r['kind']:<19} {r['ticket']:<8} "
                              f"{format_money(r['amount'], r['currency']):>12}  {r['status']:<9} {'valid' if r['valid'] else 'INVALID'}")
