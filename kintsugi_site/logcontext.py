"""The same module as core.logcontext, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import logcontext

sys.modules[__name__] = logcontext
