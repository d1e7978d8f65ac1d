"""Roles (the groups of core.roles: Support lead, Reviewer, Auditor) as API permissions, asked through the
one capability table (provenance.access.capabilities) that the admin, MCP and the CLI ask too.

Reads need the view's `read_capability` (what is read); membership of the workspace is checked by the
querysets (another workspace answers 404). Changes are checked by the services themselves
(flag_source, approve_item, reject_item) and answer 403 through the exception handler; retry_incident
has no check of its own, so MayRetryIncidents checks it here."""
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated

from provenance.access import capabilities


class RolePermission(IsAuthenticated):
    """Safe methods need the view's `read_capability` (if it names one)."""

    message = "your role does not allow reading this"

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        capability = getattr(view, "read_capability", None)
        return request.method not in SAFE_METHODS or capability is None or capabilities.may(request.user, capability)


class MayRetryIncidents(IsAuthenticated):
    """Retrying a repair is the Support lead's call, like flagging."""

    message = "retrying a repair needs the Support lead role (repairs.flag_source)"

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and capabilities.may(request.user, "flag")
