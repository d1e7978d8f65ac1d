import sys

from compensation.audit import verify_chain
from provenance.management.commands._common import KintsugiCommand


class Command(KintsugiCommand):
    help = "Check the audit trail's hash chain: exit 0 when it holds, 1 naming the first broken row."

    def handle(self, *args, **o):
        broken, checked, head = verify_chain()
        if broken:
            sys.stderr.write(f"{broken}\n")
            self.stdout.write(f"checked {checked} rows; first broken row: seq={broken.seq} id={broken.id}")
            sys.exit(1)
        self.stdout.write(f"audit chain holds: {checked} rows, head {head}")
