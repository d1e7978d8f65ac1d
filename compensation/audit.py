"""The same module as core.audit, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from core import audit

sys.modules[__name__] = audit
