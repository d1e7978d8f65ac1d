"""The page a refused person sees (403): in the admin's own frame (header, user menu), naming the role the
page needs and the people who can grant it: the Workspace admins of the person's workspaces.

The role comes from the refusal itself when it names one ("… needs the Reviewer role"), else from the
part of the admin the page belongs to. The refusal's text is escaped like any other text."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.template.response import TemplateResponse

from core.vocabulary import Role
from provenance.access import tenancy

# The part of the admin → the role its pages are for (first match wins).
ROLE_BY_PATH = (
    ("/admin/compensation/auditevent/", Role.AUDITOR),
    ("/admin/compensation/", Role.REVIEWER),
    ("/admin/provenance/workspace/", Role.WORKSPACE_ADMIN),
    ("/admin/provenance/", Role.SUPPORT_LEAD),
    ("/admin/repairs/", Role.SUPPORT_LEAD),
)
WHAT_ROLES_DO = {
    Role.REVIEWER: "approves, rejects and edits what leaves for customers, and works the cases",
    Role.SUPPORT_LEAD: "flags sources, follows incidents and adds reviewers to the workspace",
    Role.AUDITOR: "reads and exports the audit trail",
    Role.WORKSPACE_ADMIN: "adds and removes the workspace's members",
}


def needed_role(request, exception) -> str:
    said = str(exception or "")
    named = next((r for r in Role if f"{r.value} role" in said or f"({r.value}" in said), None)
    if named is not None:
        return named.value
    return next((r.value for prefix, r in ROLE_BY_PATH if request.path.startswith(prefix)), "")


def granters(user) -> list:
    """Who can give `user` a role where they work: the active Workspace admins of their workspaces."""
    if user is None or not user.is_authenticated:
        return []
    return list(get_user_model().objects.filter(is_active=True, groups__name=Role.WORKSPACE_ADMIN,
                                                workspaces__in=tenancy.visible_workspaces(user=user))
                .exclude(pk=user.pk).distinct().order_by("username")[:10])


def permission_denied(request, exception=None):
    role = needed_role(request, exception)
    context = {
        **admin.site.each_context(request),
        "title": "Not allowed",
        "exception": str(exception or ""),
        "needed_role": role,
        "role_does": WHAT_ROLES_DO.get(role, ""),
        "granters": granters(request.user),
        "roles": [(r.value, WHAT_ROLES_DO[r]) for r in Role],
    }
    return TemplateResponse(request, "403.html", context, status=403)
