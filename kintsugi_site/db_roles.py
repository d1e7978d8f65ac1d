"""The same module as core.db_roles, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import db_roles

sys.modules[__name__] = db_roles
