"""The same module as provenance.admin_tenancy, under the name older imports use (one module object, so patches and
registries are shared)."""
import sys

from provenance import admin_tenancy

sys.modules[__name__] = admin_tenancy
