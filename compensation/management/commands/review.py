from compensation.delivery.links import compensates
from compensation.models import CompensationItem
from compensation.review.services import approve_item, reject_item
from core.commands import KintsugiCommand
from core.users import get_user
from core.vocabulary import Via


class Command(KintsugiCommand):
    help = ("Approve or reject one compensation item as --user. Refusals (four-eyes, role, invalid draft, "
            "already decided) print one line on stderr and exit 2; they are recorded in the audit trail.")

    def add_arguments(self, parser):
        parser.add_argument("--item", required=True, type=int)
        parser.add_argument("--decision", required=True, choices=["approve", "reject"])
        parser.add_argument("--user", required=True)
        parser.add_argument("--reason", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        actor = get_user(o["user"])
        try:
            item = CompensationItem.objects.get(pk=o["item"])
        except CompensationItem.DoesNotExist:
            raise LookupError(f"unknown compensation item {o['item']}") from None
        if o["decision"] == "approve":
            item = approve_item(item=item, actor=actor, reason=o["reason"], via=Via.CLI)
        else:
            item = reject_item(item=item, actor=actor, reason=o["reason"], via=Via.CLI)
        item.refresh_from_db()
        if o["json"]:
            self.print_json({"id": item.pk, "incident": item.incident_id, "kind": item.kind, "ticket": item.ticket_id,
                             "amount": item.amount_cents, "status": item.status, "valid": item.valid,
                             "decided_by": actor.get_username(), "reason": item.decision_reason,
                             "compensates": compensates([item])[item.pk]})
        else:
            self.stdout.write(f"item #{item.pk}: {item.status}")
