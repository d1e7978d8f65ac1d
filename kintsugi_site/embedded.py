"""The same module as core.embedded, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import embedded

sys.modules[__name__] = embedded
