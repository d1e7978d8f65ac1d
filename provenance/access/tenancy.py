"""Who may see which workspace: the one rule every entry point asks (admin pages and their filters and
totals, the REST API, MCP, the CLI's --user).

Superusers see every workspace; everyone else sees the workspaces they are a member of, and nothing
else exists for them: another workspace's object is answered exactly like a missing one (404). Roles
(Support lead, Reviewer, Auditor, Workspace admin) say what a person may do in the workspaces they see;
they never widen what is seen.
"""
from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from core.vocabulary import Via
from provenance.models import Workspace


def sees_every_workspace(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_superuser)


def visible_workspaces(*, user) -> QuerySet[Workspace]:
    """The workspaces `user` may see and act on: the ones they are a member of (superusers: all)."""
    if not user or not user.is_authenticated or not user.is_active:
        return Workspace.objects.none()
    if user.is_superuser:
        return Workspace.objects.all()
    return Workspace.objects.filter(members=user)


def scoped(queryset: QuerySet, *, user, path: str = "workspace") -> QuerySet:
    """`queryset` narrowed to the rows whose workspace (reached through `path`, a lookup such as
    "incident__workspace") `user` may see. Superusers get it unchanged, so their queries keep their plans."""
    if sees_every_workspace(user):
        return queryset
    return queryset.filter(**{f"{path}__in": visible_workspaces(user=user)})


def may_see(user, workspace: Workspace | int | None) -> bool:
    if workspace is None:
        return sees_every_workspace(user)
    pk = workspace.pk if isinstance(workspace, Workspace) else workspace
    return sees_every_workspace(user) or visible_workspaces(user=user).filter(pk=pk).exists()


def home_workspaces(user) -> list[Workspace]:
    """The workspaces whose audit chains record what `user` tried elsewhere (a refused cross-workspace
    attempt belongs to the record of the team the person works in)."""
    if not user or not user.is_authenticated:
        return []
    return list(Workspace.objects.filter(members=user).order_by("pk"))


class NotVisible(LookupError, Http404):
    """The object is in a workspace the person may not see: answered like a missing object (a 404 in the
    admin and the API, "not found" in MCP, exit 2 on the command line)."""


OPERATOR_VIA = Via.CLI  # a shell on the deployment: --user names whom to attribute the act to


def require_visible(actor, workspace: Workspace | int, *, via: str, what: str) -> None:
    """Services call this before changing anything of a workspace, so a view that forgot to scope its
    query still cannot act across workspaces. The command line is the operator's (whoever has a shell
    there can reach the database directly): --user attributes the act, membership is not asked."""
    if via == OPERATOR_VIA:
        return
    if not may_see(actor, workspace):
        raise NotVisible(f"no {what}")
