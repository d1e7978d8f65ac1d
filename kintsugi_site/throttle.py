"""The same module as core.throttle, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import throttle

sys.modules[__name__] = throttle
