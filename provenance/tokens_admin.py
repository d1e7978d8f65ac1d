"""The admin's API token list (rest_framework.authtoken's) with each token's expiry and last use
(provenance.access.tokens keeps them beside the token)."""
from django.contrib import admin, messages
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy


class LeasedTokenAdmin(TokenAdmin):
    list_display = ("key_prefix", "user", "created", "expires_at", "last_used_at")
    list_select_related = ("user", "lease")

    @admin.display(description="key")
    def key_prefix(self, obj) -> str:
        lease = getattr(obj, "lease", None)
        return f"{lease.prefix if lease and lease.prefix else '?'}…"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change and getattr(obj, "plain_key", None):
            # Only the key's digest is stored: this is the one time it can be shown.
            messages.warning(request, f"The new API token for {obj.user}: {obj.plain_key} (shown this once; "
                                      f"copy it now)")

    @admin.display(description="expires")
    def expires_at(self, obj):
        lease = getattr(obj, "lease", None)
        return lease.expires_at if lease and lease.expires_at else "never"

    @admin.display(description="last used")
    def last_used_at(self, obj):
        lease = getattr(obj, "lease", None)
        return lease.last_used_at if lease and lease.last_used_at else "—"


if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)
admin.site.register(TokenProxy, LeasedTokenAdmin)
