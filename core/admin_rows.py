"""Records that only the services write, each write with its audit row: the admin shows them and
offers no raw add, change or delete page."""


class WrittenByServices:
    """A ModelAdmin mixin: every row read-only; changes go through the services' own forms."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
