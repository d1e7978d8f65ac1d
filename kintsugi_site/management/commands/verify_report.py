import json
import sys
from pathlib import Path

from core.audit import keys
from core.commands import KintsugiCommand
from kintsugi_site.report_record import ReportRefused, verify_report


class Command(KintsugiCommand):
    help = ("Check a downloaded JSON incident report offline: its signature and its audit checkpoint's, with the "
            "public key. Exit 0 when it holds, 1 with the reason when it does not.")

    def add_arguments(self, parser):
        parser.add_argument("path", help="the JSON report")
        parser.add_argument("--public-key", help="PEM public key (default: the one beside KINTSUGI_AUDIT_SIGNING_KEY)")

    def handle(self, *args, **o):
        try:
            report = json.loads(Path(o["path"]).read_text(encoding="utf-8"))
            key = keys.load_public_key(o["public_key"] or keys.public_key_path())
            self.stdout.write(verify_report(report, public_key=key))
        except (ReportRefused, OSError, ValueError) as exc:
            sys.stderr.write(f"report does not hold: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n")
            sys.exit(1)
