"""The same module as core.egress, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import egress

sys.modules[__name__] = egress
