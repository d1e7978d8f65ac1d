from pathlib import Path

from compensation.backup import BackupError
from compensation.restore import restore
from core.commands import KintsugiCommand


class Command(KintsugiCommand):
    help = ("Restore a backup (manage.py backup DIR) into this home, which must be fresh: an empty or missing "
            "database, no graphs under KINTSUGI_GRAPH_PREFIX, an empty checkpoint log. Open repairs resume "
            "as after a crash; run verify_audit afterwards.")

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path)

    def handle(self, *args, **o):
        try:
            done = restore(o["directory"])
        except BackupError as exc:
            self._fail(str(exc))
        self.stdout.write(f"restored database {done['database']}, {done['graphs']} graphs, "
                          f"{done['checkpoints_carried']} checkpoints re-anchored")
        if done["secret_box_problem"]:
            self.stderr.write(f"warning: {done['secret_box_problem']}")
