from compensation.delivery.execution import execute_approved
from compensation.models import CompensationItem
from core.commands import KintsugiCommand
from core.vocabulary import Via
from core.wording import counted


class Command(KintsugiCommand):
    help = ("Execute now every approved compensation item still waiting for its worker task (lost while the "
            "broker was down, say). Exactly once: an item already executed sends nothing again.")

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        executed = execute_approved(via=Via.CLI)
        waiting = CompensationItem.objects.filter(status=CompensationItem.Status.APPROVED).count()
        if o["json"]:
            self.print_json({"executed": executed, "waiting": waiting})
        else:
            self.stdout.write(f"executed {counted(executed, 'waiting item')}; {waiting:,} still waiting")
