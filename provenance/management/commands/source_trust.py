from provenance import validation
from core.commands import KintsugiCommand
from provenance.models import Source
from provenance.recording.recorder import UnknownSource
from provenance.recording.services import get_workspace
from provenance.access.trust import set_source_trust
from core.users import get_user
from core.vocabulary import Via

VIA = Via.CLI


class Command(KintsugiCommand):
    help = ("Set how far a source is trusted (untrusted, unknown or trusted), as --user (who needs the Support "
            "lead role) with a --reason: the same service as the source's admin page and "
            "POST /api/v1/sources/{id}/trust/, recorded as one source.trust_set audit event.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--source", required=True, help="the source_id")
        # Not argparse choices: an unknown level is the service's one-line refusal, exit 2, like any bad input.
        parser.add_argument("--trust", required=True, metavar="untrusted|unknown|trusted")
        parser.add_argument("--user", required=True, help="who sets it (Support lead role)")
        parser.add_argument("--reason", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        actor = get_user(o["user"])
        source_id = validation.source_id(o["source"])
        source = Source.objects.filter(workspace=workspace, source_id=source_id).first()
        if source is None:
            raise UnknownSource(f"unknown source {source_id!r} in workspace {workspace.name!r}")
        source = set_source_trust(source=source, level=o["trust"], actor=actor, reason=o["reason"], via=VIA)
        if o["json"]:
            self.print_json({"workspace": workspace.name, "source": source.source_id, "id": source.pk,
                             "trust": source.trust})
        else:
            self.stdout.write(f"{source.source_id} in {workspace.name} is now {source.trust}")
