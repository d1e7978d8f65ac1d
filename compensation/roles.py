"""The same module as core.roles, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import roles

sys.modules[__name__] = roles
