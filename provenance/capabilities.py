"""What a role may read or do: one table, asked by every surface (admin, REST API, MCP, the CLI's --user).

Membership of a workspace (provenance.tenancy) says where a person may look; a capability says what
they may read or do there. Each capability is held through one Django permission, which the roles
(the groups of compensation.roles) grant, so the admin's own permission checks, the API's
RolePermission, the MCP tools and the services all answer the same question the same way: a member
without the role is refused (403 in the admin and the API, an error in MCP, exit 2 on the command
line), whatever surface they try.

The table is walked by tests/trust/test_capability_surfaces.py: role x capability x surface.
"""
from __future__ import annotations

# capability -> the permission that grants it
CAPABILITIES: dict[str, str] = {
    "read_workspace": "provenance.view_workspace",
    "read_sources": "provenance.view_source",      # blast radius, explain, facts, suspicious sources
    "read_tickets": "provenance.view_ticket",
    "read_incidents": "repairs.view_incident",     # incident status, reports
    "read_items": "compensation.view_compensationitem",  # the review queue: customers, drafts, amounts
    "read_audit": "compensation.view_auditevent",
    "export_audit": "compensation.export_auditevent",
    "read_ledger": "provenance.view_ledgerentry",
    "read_outbox": "provenance.view_outboxemail",
    "flag": "repairs.flag_source",                 # flag, retry, what-if
    "review": "compensation.review_compensationitem",  # approve, reject, edit
    "set_trust": "repairs.flag_source",            # trusting a source is a call like flagging it
    "manage_members": "provenance.manage_members",
    "manage_agents": "provenance.manage_agents",
    "add_workspace": "provenance.add_workspace",
}


class CapabilityDenied(PermissionError):
    """The person's roles do not grant the capability (a 403; never a 404: the workspace is theirs)."""


def permission_for(capability: str) -> str:
    try:
        return CAPABILITIES[capability]
    except KeyError:
        raise LookupError(f"unknown capability {capability!r}") from None


def may(user, capability: str) -> bool:
    """Whether `user` holds `capability` (superusers hold every one; inactive or anonymous users none)."""
    perm = permission_for(capability)
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return False
    return bool(user.is_superuser or user.has_perm(perm))


def require(user, capability: str, *, what: str | None = None) -> None:
    if not may(user, capability):
        name = user.get_username() if user is not None and getattr(user, "is_authenticated", False) else "anonymous"
        raise CapabilityDenied(f"user {name!r} may not {what or capability.replace('_', ' ')} "
                               f"(needs {permission_for(capability)})")
