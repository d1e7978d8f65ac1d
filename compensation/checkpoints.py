"""The same module as core.checkpoints, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import checkpoints

sys.modules[__name__] = checkpoints
