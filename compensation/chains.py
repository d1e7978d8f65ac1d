"""The same module as core.chains, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import chains

sys.modules[__name__] = chains
