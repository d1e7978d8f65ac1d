"""The same module as provenance.refusals, under the name older imports use."""
import sys

from provenance import refusals

sys.modules[__name__] = refusals
