from compensation.selectors import queue_rows, review_queue
from core.commands import KintsugiCommand
from provenance.services import get_workspace


class Command(KintsugiCommand):
    help = "List a workspace's compensation items, pending first (with --json, amount in integer cents)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        if o["json"]:
            self.print_json(queue_rows(workspace=workspace))
            return
        # The JSON's keys are a contract (amount in cents, no currency); people read the items' money instead.
        items = list(review_queue(workspace=workspace))
        if not items:
            self.stdout.write("no compensation items")
        for i in items:
            self.stdout.write(f"#{i.pk:<6} incident {i.incident_id:<5} {i.kind:<19} {i.ticket_id:<8} "
                              f"{i.amount_display:>12}  {i.status:<9} {'valid' if i.valid else 'INVALID'}")
