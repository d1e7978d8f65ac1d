"""What every kintsugi command shares: known errors become one line on stderr and exit code 2."""
from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from core.scrub import scrub_secrets

KNOWN_ERRORS: tuple[type[Exception], ...] = (DomainError, LookupError, PermissionError, ValueError)


class KintsugiCommand(BaseCommand):
    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            self._fail(str(exc))
        except KNOWN_ERRORS as exc:
            self._fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _fail(self, message: str) -> None:
        self.stderr.style_func = None
        self.stderr.write(f"error: {scrub_secrets(message)}")
        sys.exit(2)

    def print_json(self, data) -> None:
        self.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str))
