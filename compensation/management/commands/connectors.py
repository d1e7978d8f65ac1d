import json

from compensation.delivery.connectors import config
from compensation.delivery.deliveries import set_connector
from provenance.access import tenancy
from core.commands import KintsugiCommand
from core.users import get_user
from core.vocabulary import Via
from provenance.recording.services import get_workspace


class Command(KintsugiCommand):
    help = ("List which connector delivers each item kind in a workspace, and whether it has what it needs "
            "(keys come from the operator's secret registry, never from here). With --set KIND=CONNECTOR (and "
            "--options JSON of the connector's options, such as a webhook URL or the registered names of its "
            "keys: docs/connectors.md), choose one, as --user (the workspace's Workspace admin) with a --reason; "
            "audited. Options the connector refuses (schema, secret registry, egress policy) exit 2.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--set", metavar="KIND=CONNECTOR")
        parser.add_argument("--options", default="{}", help="JSON object of non-secret options")
        parser.add_argument("--user", help="who looks or chooses (without it: the operator, listing only)")
        parser.add_argument("--reason", default="")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        actor = get_user(o["user"]) if o["user"] else None
        if actor is not None:
            tenancy.require_visible(actor, workspace, via=Via.CLI, what=f"workspace {workspace.name!r}")
        if o["set"]:
            if actor is None:
                raise ValueError("--set needs --user (the workspace's Workspace admin) and --reason")
            kind, _, name = o["set"].partition("=")
            try:
                options = json.loads(o["options"])
            except ValueError:
                raise ValueError("--options must be a JSON object") from None
            if not isinstance(options, dict):
                raise ValueError("--options must be a JSON object")
            set_connector(workspace=workspace, kind=kind.strip(), name=name.strip(), options=options, actor=actor,
                          reason=o["reason"], via=Via.CLI)
        listing = config.listing(workspace_id=workspace.pk)
        if o["json"]:
            self.print_json(listing)
            return
        for kind, row in listing.items():
            state = "configured" if row["configured"] else "NOT configured"
            self.stdout.write(f"{kind:<22} {row['connector']:<16} {state}")
