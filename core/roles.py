"""The roles and their permissions (groups, created by the data migrations that call grant_roles).

A role says what a person may do; membership of a workspace (provenance.access.tenancy) says where. Roles
never widen what is seen: a Reviewer who is a member of one workspace reviews that workspace only.

Support lead: flags sources, reads incidents, items and their history, and writes the workspace's
customer message template.
Reviewer: reads, and approves / rejects / edits compensation items.
Auditor: reads everything (incidents, items, the audit trail, tickets, ledger, outbox) and exports the
audit trail; no change permission at all.
Workspace admin: adds and removes members of the workspaces they belong to (provenance.access.membership),
creates workspaces (becoming a member of each one created), and sets up what their agents need there:
sources, tickets, agent registrations and recording tokens (provenance.access.onboarding).
"""
from core.vocabulary import Role

SUPPORT_LEAD, REVIEWER, AUDITOR, WORKSPACE_ADMIN = Role.SUPPORT_LEAD, Role.REVIEWER, Role.AUDITOR, Role.WORKSPACE_ADMIN

ROLES = {
    SUPPORT_LEAD: [
        "repairs.flag_source", "repairs.view_incident", "compensation.view_compensationitem",
        "compensation.view_auditevent", "provenance.view_workspace", "provenance.view_source", "provenance.view_ticket",
        "compensation.change_messagetemplate",
    ],
    REVIEWER: [
        "repairs.view_incident", "compensation.view_compensationitem", "compensation.review_compensationitem",
        "compensation.view_auditevent", "provenance.view_ticket", "provenance.view_source",
    ],
    AUDITOR: [
        "repairs.view_incident", "repairs.view_incidenttransition", "compensation.view_compensationitem",
        "compensation.view_auditevent", "compensation.export_auditevent", "provenance.view_workspace",
        "provenance.view_source", "provenance.view_ticket", "provenance.view_ledgerentry",
        "provenance.view_outboxemail",
    ],
    WORKSPACE_ADMIN: [
        "provenance.view_workspace", "provenance.manage_members", "provenance.add_workspace",
        "provenance.manage_agents", "provenance.view_source", "provenance.add_source", "provenance.change_source",
        "provenance.view_ticket", "provenance.add_ticket", "provenance.change_ticket",
    ],
}


def grant_roles(Group, Permission, *, using: str = "default", missing_ok: bool = False) -> None:
    """Create the groups (if missing) and add their permissions; never removes any. A data migration
    passes its own connection's alias (the owner's, which runs migrations) and missing_ok: a permission
    whose model option a later migration adds is granted by that one. Every test that makes a user
    calls this, so it reads all the permissions in one query and grants each group's in one."""
    wanted = {perm for perms in ROLES.values() for perm in perms}
    found = {f"{p.content_type.app_label}.{p.codename}": p for p in Permission.objects.using(using)
             .filter(codename__in={perm.split(".")[1] for perm in wanted}).select_related("content_type")}
    for name, perms in ROLES.items():
        missing = [perm for perm in perms if perm not in found]
        if missing and not missing_ok:
            raise LookupError(f"role {name!r} names a permission that does not exist: {missing[0]}")
        group, _ = Group.objects.using(using).get_or_create(name=name)
        group.permissions.add(*(found[perm] for perm in perms if perm in found))


def ensure_roles() -> None:
    """The same with the live models (e.g. after a test database flush)."""
    from django.contrib.auth.models import Group, Permission

    grant_roles(Group, Permission)
