"""The same module as core.bulk, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import bulk

sys.modules[__name__] = bulk
