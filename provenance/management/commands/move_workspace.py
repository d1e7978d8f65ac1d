from provenance import placement
from core.commands import KintsugiCommand
from provenance.moves import move_workspace
from provenance.recording.services import get_workspace
from core.users import get_user
from core.vocabulary import Via


class Command(KintsugiCommand):
    help = ("Move a workspace's graph, baseline and model cache to another FalkorDB server (a host:port that "
            "KINTSUGI_FALKORDB_URLS lists), as --user (a superuser) with a --reason recorded in the workspace's "
            "audit chain. Refused while a repair of the workspace is under way. Safe to run again after a crash: "
            "the same move finishes what an interrupted one left. --servers lists the servers and their load.")

    def add_arguments(self, parser):
        parser.add_argument("workspace", nargs="?")
        parser.add_argument("--to", metavar="HOST:PORT", help="the server to move to")
        parser.add_argument("--user", help="who moves it (a superuser)")
        parser.add_argument("--reason", default="")
        parser.add_argument("--servers", action="store_true", help="list the servers and what each holds")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        if o["servers"]:
            rows = placement.servers_in_use()
            if o["json"]:
                return self.print_json(rows)
            for row in rows:
                self.stdout.write(f"{row['server']}: {row['workspaces']} workspaces, {row['actions']} actions")
            return
        if not o["workspace"] or not o["to"] or not o["user"]:
            self._fail("give a workspace, --to HOST:PORT and --user (or --servers)")
        workspace = get_workspace(o["workspace"])
        actor = get_user(o["user"])

        def progress(done: int, total: int) -> None:
            if not o["json"]:
                self.stdout.write(f"  {done}/{total} {'copied' if done < total else 'old copies deleted'}")

        result = move_workspace(workspace=workspace, to_server=o["to"], actor=actor, reason=o["reason"], via=Via.CLI,
                                progress=progress)
        if o["json"]:
            return self.print_json(result.__dict__)
        if result.moved:
            sizes = ", ".join(f"{name}: {c['nodes']} nodes, {c['edges']} edges" for name, c in result.copied.items() if c)
            self.stdout.write(f"moved {result.workspace} from {result.from_server} to {result.to_server} ({sizes or 'no graphs yet'})")
        else:
            self.stdout.write(f"{result.workspace} is on {result.to_server} already")
        for name in result.deleted:
            self.stdout.write(f"deleted {name}")
