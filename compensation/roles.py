"""The three roles of issue 4 and their permissions (groups are created by migration 0002_roles).

Support lead: flags sources and reads incidents, items and their history.
Reviewer: reads, and approves / rejects / edits compensation items.
Auditor: reads everything (incidents, items, the audit trail, tickets, ledger, outbox) and exports the
audit trail; no change permission at all.
"""
SUPPORT_LEAD, REVIEWER, AUDITOR = "Support lead", "Reviewer", "Auditor"

ROLES = {
    SUPPORT_LEAD: [
        "repairs.flag_source", "repairs.view_incident", "compensation.view_compensationitem",
        "compensation.view_auditevent", "provenance.view_workspace", "provenance.view_source", "provenance.view_ticket",
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
}


def grant_roles(Group, Permission, *, using: str = "default") -> None:
    """Create the groups (if missing) and add their permissions; never removes any. `using`: a data
    migration passes its own connection's alias (the owner's, which runs migrations)."""
    for name, perms in ROLES.items():
        group, _ = Group.objects.using(using).get_or_create(name=name)
        for perm in perms:
            app_label, codename = perm.split(".")
            group.permissions.add(Permission.objects.using(using).get(content_type__app_label=app_label, codename=codename))


def ensure_roles() -> None:
    """The same with the live models (e.g. after a test database flush)."""
    from django.contrib.auth.models import Group, Permission

    grant_roles(Group, Permission)
