from core.commands import KintsugiCommand
from repairs.models import Incident
from core.users import get_user
from repairs.services import incident_summary, retry_incident


class Command(KintsugiCommand):
    help = ("Send a failed or blocked repair back to the worker as --user; it resumes from its checkpoint. "
            "A refusal (the incident is not failed or blocked) prints one line on stderr and exits 2.")

    def add_arguments(self, parser):
        parser.add_argument("incident", type=int, help="the incident's number")
        parser.add_argument("--user", required=True)
        parser.add_argument("--reason", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        actor = get_user(o["user"])
        try:
            incident = Incident.objects.select_related("workspace").get(pk=o["incident"])
        except Incident.DoesNotExist:
            raise LookupError(f"unknown incident {o['incident']}") from None
        incident = retry_incident(incident=incident, actor=actor, reason=o["reason"], via=Incident.Via.CLI)
        incident.refresh_from_db()  # the enqueue after commit blocks it again if the broker is down
        if o["json"]:
            self.print_json(incident_summary(incident))
        else:
            self.stdout.write(f"incident #{incident.pk}: {incident.status}"
                              + (f" ({incident.error})" if incident.error else ""))
