import sys
from pathlib import Path

from core.commands import KintsugiCommand
from provenance.progress import reporter
from repairs.models import Incident
from kintsugi_site.reports import FORMATS, render_report


class Command(KintsugiCommand):
    help = ("Export an incident report: metadata, outcome counts, per-action outcomes, per-ticket before/after, "
            "invalidated effects, compensation items with decisions and audit history, verification. "
            "csv is a zip of tables; pdf is rendered from the same template as the admin page.")

    def add_arguments(self, parser):
        parser.add_argument("incident", type=int, help="the incident's number")
        parser.add_argument("--format", choices=FORMATS, default="json")
        parser.add_argument("--output", required=True, help="file to write, or - for stdout")

    def handle(self, *args, **o):
        try:
            incident = Incident.objects.get(pk=o["incident"])
        except Incident.DoesNotExist:
            raise LookupError(f"unknown incident {o['incident']}") from None
        body, _, filename = render_report(incident, o["format"], progress=reporter(f"incident #{incident.pk} report"))
        if o["output"] == "-":
            sys.stdout.buffer.write(body)
            return
        out = Path(o["output"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
        self.stderr.write(f"wrote {out} ({len(body):,} bytes, {filename})")
