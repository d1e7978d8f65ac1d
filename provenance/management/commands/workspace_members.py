from django.contrib.auth import get_user_model

from provenance.access import membership
from core.commands import KintsugiCommand
from provenance.recording.services import get_workspace
from core.users import get_user
from core.vocabulary import Via


class Command(KintsugiCommand):
    help = ("List, add or remove the members of a workspace. Changes are made as --user (a superuser, or a "
            "Workspace admin who belongs to the workspace) with a --reason, and each lands in the audit record.")

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--add", action="append", default=[], metavar="USERNAME")
        parser.add_argument("--remove", action="append", default=[], metavar="USERNAME")
        parser.add_argument("--user", help="who makes the change (required with --add/--remove)")
        parser.add_argument("--reason", default="")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        workspace = get_workspace(o["workspace"])
        added, removed = [], []
        if o["add"] or o["remove"]:
            if not o["user"]:
                self._fail("--user is required to change members")
            actor = get_user(o["user"])
            wanted = {u.pk: u for u in workspace.members.all()}
            for name in o["add"]:
                user = get_user(name)
                wanted[user.pk] = user
            for name in o["remove"]:
                wanted.pop(get_user(name).pk, None)
            added, removed = membership.set_members(workspace=workspace, users=list(wanted.values()), actor=actor,
                                                    reason=o["reason"], via=Via.CLI)
        members = sorted(get_user_model().objects.filter(workspaces=workspace).values_list("username", flat=True))
        if o["json"]:
            self.print_json({"workspace": workspace.name, "members": members,
                             "added": [u.get_username() for u in added], "removed": [u.get_username() for u in removed]})
        else:
            for u in added:
                self.stdout.write(f"added {u.get_username()}")
            for u in removed:
                self.stdout.write(f"removed {u.get_username()}")
            self.stdout.write(f"{workspace.name}: {', '.join(members) or 'no members'}")
