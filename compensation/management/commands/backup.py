from pathlib import Path

from compensation.backup import BackupError, backup
from core.commands import KintsugiCommand
from core.wording import counted


class Command(KintsugiCommand):
    help = ("Back up this home into DIR (new or empty, made 0700; every file 0600): a pg_dump of the database the "
            "application is connected to, every FalkorDB graph of each server and the audit checkpoint log, named "
            "in DIR/manifest.json (keys postgres, falkordb, checkpoints). The main tables' rows are counted in the "
            "dump's own snapshot and read back from the dump; a dump that does not hold them fails (exit 2). "
            "Writers of each workspace wait while its graphs are copied.")

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path)
        parser.add_argument("--lock-wait", type=float, default=60.0,
                            help="seconds to wait for a workspace's writer before giving up (default 60)")
        parser.add_argument("--json", action="store_true", help="print the manifest")

    def handle(self, *args, **o):
        try:
            manifest = backup(o["directory"], lock_wait_seconds=o["lock_wait"])
        except BackupError as exc:
            self._fail(str(exc))
        if o["json"]:
            self.print_json(manifest)
            return
        graphs = sum(len(s["graphs"]) for s in manifest["falkordb"].values())
        rows = manifest["postgres"]["rows"]
        self.stdout.write(f"backed up database {manifest['postgres']['database']} "
                          f"({manifest['postgres']['bytes']:,} bytes; {rows['tickets']:,} tickets, {rows['incidents']:,} "
                          f"incidents, {rows['audit_events']:,} audit events, checked in the dump), {counted(graphs, 'graph')} on "
                          f"{counted(len(manifest['falkordb']), 'FalkorDB server')} and {manifest['checkpoints']['lines']:,} "
                          f"checkpoints into {o['directory']}")
