"""What a role may read or do: one table, asked by every surface (admin, REST API, MCP, the CLI's --user).

Membership of a workspace (provenance.access.tenancy) says where a person may look; a capability says what
they may read or do there. Each capability is held through one Django permission, which the roles
(the groups of core.roles) grant, so the admin's own permission checks, the API's
RolePermission, the MCP tools and the services all answer the same question the same way: a member
without the role is refused (403 in the admin and the API, an error in MCP, exit 2 on the command
line), whatever surface they try.

The table is walked by tests/trust/test_capability_surfaces.py: role x capability x surface.
"""
from __future__ import annotations

from core.vocabulary import Role, Via

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
    "edit_message_template": "compensation.change_messagetemplate",  # the customer message's wording
}


# capability -> the roles (core.roles) that hold it, named in refusals; a test holds this to the
# roles' own permissions, so it cannot drift from them.
LEAD, REVIEWER, AUDITOR, WS_ADMIN = Role.SUPPORT_LEAD, Role.REVIEWER, Role.AUDITOR, Role.WORKSPACE_ADMIN
HELD_BY: dict[str, tuple[str, ...]] = {
    "read_workspace": (LEAD, AUDITOR, WS_ADMIN),
    "read_sources": (LEAD, REVIEWER, AUDITOR, WS_ADMIN),
    "read_tickets": (LEAD, REVIEWER, AUDITOR, WS_ADMIN),
    "read_incidents": (LEAD, REVIEWER, AUDITOR),
    "read_items": (LEAD, REVIEWER, AUDITOR),
    "read_audit": (LEAD, REVIEWER, AUDITOR),
    "export_audit": (AUDITOR,),
    "read_ledger": (AUDITOR,),
    "read_outbox": (AUDITOR,),
    "flag": (LEAD,),
    "review": (REVIEWER,),
    "set_trust": (LEAD,),
    "manage_members": (WS_ADMIN,),
    "manage_agents": (WS_ADMIN,),
    "add_workspace": (WS_ADMIN,),
    "edit_message_template": (LEAD,),
}


class CapabilityDenied(PermissionError):
    """The person's roles do not grant the capability (a 403; never a 404: the workspace is theirs)."""


def permission_for(capability: str) -> str:
    try:
        return CAPABILITIES[capability]
    except KeyError:
        raise LookupError(f"unknown capability {capability!r}") from None


# What the command line does as the operator: whoever has a shell on the deployment can reach its
# database, so `flag_source`, `retry_incident` and `what_if` attribute the act to --user without asking
# their role (as the operator's scripts have always done). Everything else the command line does as
# --user (review, source trust, onboarding, membership) asks the role like every other surface.
OPERATOR_ACTS = frozenset({"flag"})
OPERATOR_VIA = Via.CLI


def may(user, capability: str, *, via: str | None = None) -> bool:
    """Whether `user` holds `capability` (superusers hold every one; inactive or anonymous users none),
    asked on `via` (the command line performs OPERATOR_ACTS for whoever --user names)."""
    perm = permission_for(capability)
    if via == OPERATOR_VIA and capability in OPERATOR_ACTS:
        return True
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return False
    return bool(user.is_superuser or user.has_perm(perm))


def require(user, capability: str, *, what: str | None = None, via: str | None = None) -> None:
    if not may(user, capability, via=via):
        name = user.get_username() if user is not None and getattr(user, "is_authenticated", False) else "anonymous"
        raise CapabilityDenied(f"user {name!r} may not {what or capability.replace('_', ' ')} "
                               f"({' or '.join(HELD_BY[capability])} role needed)")
