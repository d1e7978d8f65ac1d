"""The same module as core.money, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import money

sys.modules[__name__] = money
