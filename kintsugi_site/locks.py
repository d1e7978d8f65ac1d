"""The same module as core.locks, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import locks

sys.modules[__name__] = locks
