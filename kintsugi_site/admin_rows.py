"""The same module as core.admin_rows, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import admin_rows

sys.modules[__name__] = admin_rows
