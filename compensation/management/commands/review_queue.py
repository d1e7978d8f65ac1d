from compensation.delivery.links import compensates
from compensation.review.selectors import queue_rows, review_queue
from core.commands import KintsugiCommand
from provenance.recording.services import get_workspace


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
        compensated = compensates(items)
        for i in items:
            self.stdout.write(f"#{i.pk:<6} incident {i.incident_id:<5} {i.kind:<19} {i.ticket_id:<8} "
                              f"{i.amount_display:>12}  {i.status:<9} {'valid' if i.valid else 'INVALID'}")
            if compensated[i.pk]:
                self.stdout.write("        compensates " + "; ".join(effect_words(e) for e in compensated[i.pk]))


def effect_words(effect: dict) -> str:
    """One compensated effect on a line a person reads: `refund #12 of action 34 (invalidated, key r-t05)`.
    The kind and the key are what an agent recorded: shown as Python literals when they hold anything a
    terminal would act on."""
    key = effect["idempotency_key"]
    sent = f"key {_plain(key)}" if key else "never left"
    return f"{_plain(effect['kind'])} #{effect['effect_id']} of action {effect['action_id']} ({effect['role']}, {sent})"


def _plain(text: str) -> str:
    return text if text.isprintable() else repr(text)
