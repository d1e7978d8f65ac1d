"""Who belongs to which workspace, and who may change that.

Membership is what the tenancy rule (provenance.access.tenancy) reads, so changing it is a privileged act:
superusers may change any workspace's members; a Workspace admin (permission
provenance.manage_members) may change the members of the workspaces they belong to, and of no other,
adding only the users their picker shows (pickable_users): people already in a workspace they
administer, or made visible to one of those workspaces by a superuser.
Roles themselves (the groups) stay with superusers.

Every change of membership lands in the audit record's system chain. The services below record who did
it and why; a change made around them (a shell, a script calling `workspace.members.add`) is still
recorded by the m2m_changed receiver, as unattributed.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

from django.db import transaction
from django.db.models import Q

from core.vocabulary import Role
from provenance.models import Workspace

MANAGE_MEMBERS = "provenance.manage_members"

# Who is changing membership right now (set by the services; read by the m2m_changed receiver).
_attribution: contextvars.ContextVar[dict | None] = contextvars.ContextVar("membership_attribution", default=None)


class MembershipRefused(PermissionError):
    pass


def may_manage_members(actor, workspace: Workspace) -> bool:
    if actor is None or not actor.is_authenticated or not actor.is_active:
        return False
    if actor.is_superuser:
        return True
    return actor.has_perm(MANAGE_MEMBERS) and workspace.members.filter(pk=actor.pk).exists()


def manageable_workspaces(actor):
    """The workspaces whose members `actor` may change."""
    if actor is None or not actor.is_authenticated or not actor.is_active:
        return Workspace.objects.none()
    if actor.is_superuser:
        return Workspace.objects.all()
    if not actor.has_perm(MANAGE_MEMBERS):
        return Workspace.objects.none()
    return Workspace.objects.filter(members=actor)


def pickable_users(actor):
    """The users `actor` may find in the members picker and add to a workspace: everyone for a
    superuser; for a Workspace admin, the members of the workspaces they administer and the users a
    superuser made visible to one of those workspaces; nobody for anyone else. Other teams' people stay
    out of sight unless a superuser says otherwise."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    if actor is None or not actor.is_authenticated or not actor.is_active:
        return users.none()
    if actor.is_superuser:
        return users
    managed = manageable_workspaces(actor).values("pk")
    # Through the link tables: `managed` is itself filtered on members, and a join on it would be reused.
    members = Workspace.members.through.objects.filter(workspace_id__in=managed).values("user_id")
    visible = Workspace.visible_users.through.objects.filter(workspace_id__in=managed).values("user_id")
    return users.filter(Q(pk__in=members) | Q(pk__in=visible) | Q(pk=actor.pk))


@contextmanager
def attributed(*, actor, reason: str, via: str):
    token = _attribution.set({"actor": actor, "reason": reason, "via": via})
    try:
        yield
    finally:
        _attribution.reset(token)


def current_attribution() -> dict | None:
    return _attribution.get()


def set_members(*, workspace: Workspace, users, actor, reason: str, via: str) -> tuple[list, list]:
    """Make `users` the members of `workspace`. Returns (added, removed) users; each change is audited."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to change who belongs to a workspace")
    if not may_manage_members(actor, workspace):
        raise MembershipRefused(f"user {getattr(actor, 'username', None)!r} may not change the members of "
                                f"workspace {workspace.name!r} (superuser or its Workspace admin needed)")
    wanted = {u.pk: u for u in users}
    with transaction.atomic(), attributed(actor=actor, reason=reason, via=via):
        current = {u.pk: u for u in workspace.members.select_for_update().all()}
        added = [u for pk, u in sorted(wanted.items()) if pk not in current]
        unseen = {u.pk for u in added} - set(pickable_users(actor).filter(pk__in=[u.pk for u in added])
                                             .values_list("pk", flat=True))
        if unseen:
            raise MembershipRefused(f"user {getattr(actor, 'username', None)!r} may not add users outside the "
                                    f"members picker (members of workspaces they administer, or made visible "
                                    f"to them by a superuser)")
        removed = [u for pk, u in sorted(current.items()) if pk not in wanted]
        if removed:
            workspace.members.remove(*removed)
        if added:
            workspace.members.add(*added)
    return added, removed


def set_visible_users(*, workspace: Workspace, users, actor, reason: str, via: str) -> tuple[list, list]:
    """Make `users` the ones this workspace's Workspace admins may find in the members picker (superusers
    only). Returns (added, removed); each change is audited."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to change who a workspace's admins may see")
    if actor is None or not getattr(actor, "is_superuser", False):
        raise MembershipRefused("only a superuser decides which users a workspace's admins may see")
    wanted = {u.pk: u for u in users}
    with transaction.atomic(), attributed(actor=actor, reason=reason, via=via):
        current = {u.pk: u for u in workspace.visible_users.select_for_update().all()}
        added = [u for pk, u in sorted(wanted.items()) if pk not in current]
        removed = [u for pk, u in sorted(current.items()) if pk not in wanted]
        if removed:
            workspace.visible_users.remove(*removed)
        if added:
            workspace.visible_users.add(*added)
    return added, removed


def add_member(*, workspace: Workspace, user, actor, reason: str, via: str) -> bool:
    current = list(workspace.members.all())
    if any(u.pk == user.pk for u in current):
        return False
    set_members(workspace=workspace, users=current + [user], actor=actor, reason=reason, via=via)
    return True


def remove_member(*, workspace: Workspace, user, actor, reason: str, via: str) -> bool:
    current = list(workspace.members.all())
    if not any(u.pk == user.pk for u in current):
        return False
    set_members(workspace=workspace, users=[u for u in current if u.pk != user.pk], actor=actor, reason=reason,
                via=via)
    return True


# --- reviewers, added and removed by the workspace's own people -----------------------------------------
def may_manage_reviewers(actor, workspace: Workspace) -> bool:
    """A superuser, or a member of `workspace` who is its Workspace admin or a Support lead there: a lead
    staffs an incident's review without waiting for a superuser."""
    from provenance.access import capabilities

    if may_manage_members(actor, workspace):
        return True
    return (capabilities.may(actor, "flag") and workspace.members.filter(pk=actor.pk).exists())


def reviewer_candidates(actor, workspace: Workspace):
    """The Reviewers `actor` may add to `workspace`: people with the Reviewer role who are members of
    another workspace `actor` belongs to, or made visible to this workspace by a superuser (everyone for a
    superuser); never someone already a member."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True, groups__name=Role.REVIEWER)
    if not may_manage_reviewers(actor, workspace):
        return users.none()
    if not actor.is_superuser:
        mine = Workspace.members.through.objects.filter(workspace__members=actor).values("user_id")
        visible = Workspace.visible_users.through.objects.filter(workspace_id=workspace.pk).values("user_id")
        users = users.filter(Q(pk__in=mine) | Q(pk__in=visible))
    return users.exclude(workspaces=workspace).distinct().order_by("username")


def is_reviewer_only(user) -> bool:
    """Whether `user`'s roles are the Reviewer role alone: a lead removes reviewers, not other leads."""
    return set(user.groups.values_list("name", flat=True)) == {Role.REVIEWER} and not user.is_superuser


def add_reviewer(*, workspace: Workspace, user, actor, reason: str, via: str) -> None:
    """Make the Reviewer `user` a member of `workspace`; audited like every membership change."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to add a reviewer")
    if not may_manage_reviewers(actor, workspace):
        raise MembershipRefused(f"user {getattr(actor, 'username', None)!r} may not add reviewers to workspace "
                                f"{workspace.name!r} (its Workspace admin or a Support lead there needed)")
    if not reviewer_candidates(actor, workspace).filter(pk=user.pk).exists():
        raise MembershipRefused(f"{user.get_username()!r} is not a Reviewer you may add here (already a member, "
                                f"not a Reviewer, or not among the people this workspace may see)")
    with transaction.atomic(), attributed(actor=actor, reason=reason, via=via):
        workspace.members.add(user)


def remove_reviewer(*, workspace: Workspace, user, actor, reason: str, via: str) -> None:
    """Take the Reviewer `user` out of `workspace`; a Support lead removes only people who are Reviewers
    and nothing else (a Workspace admin or superuser anyone, through set_members too)."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to remove a reviewer")
    if not may_manage_reviewers(actor, workspace):
        raise MembershipRefused(f"user {getattr(actor, 'username', None)!r} may not remove reviewers from "
                                f"workspace {workspace.name!r}")
    if not workspace.members.filter(pk=user.pk).exists():
        raise MembershipRefused(f"{user.get_username()!r} is not a member of {workspace.name!r}")
    if not may_manage_members(actor, workspace) and not is_reviewer_only(user):
        raise MembershipRefused(f"{user.get_username()!r} holds more than the Reviewer role: their membership is "
                                f"for a Workspace admin to change")
    with transaction.atomic(), attributed(actor=actor, reason=reason, via=via):
        workspace.members.remove(user)
