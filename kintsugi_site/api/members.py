"""The workspace endpoints that manage people and read the desk's state: its members (listed, added and
removed by a Workspace admin of the workspace, through provenance.access.membership, which audits each change)
and `export_state` (the active facts, standing decisions and live effects the command line prints).

Roles are the deployment's groups, granted by a superuser, never by a workspace: adding a member `as` a
role checks that they hold it, so "add our Support lead" cannot quietly add someone who may not lead."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, OpenApiParameter
from rest_framework import exceptions, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from core.vocabulary import Role
from kintsugi_site.api import agents, views
from kintsugi_site.api.errors import ApiError
from provenance.access import membership
from provenance.recording.selectors import export_state

VIA = views.VIA


class MemberSerializer(serializers.Serializer):
    username = serializers.CharField()
    roles = serializers.ListField(child=serializers.CharField())


class MembersSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    members = MemberSerializer(many=True)


class MemberChangeSerializer(views.ReasonSerializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.values, required=False,
                                   help_text="The role the member is added as: refused if they do not hold it.")


class MemberChangedSerializer(MembersSerializer):
    changed = serializers.BooleanField(help_text="False when the user already was (or was not) a member.")


class StateSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    facts = serializers.ListField(child=serializers.DictField())
    decisions = serializers.ListField(child=serializers.DictField())
    effects = serializers.ListField(child=serializers.DictField())


def _roles(user) -> list[str]:
    return sorted(set(user.groups.filter(name__in=Role.values).values_list("name", flat=True)))


def _members(workspace) -> dict:
    users = workspace.members.order_by("username").prefetch_related("groups")
    return {"workspace": workspace.name, "members": [
        {"username": u.get_username(), "roles": sorted(g.name for g in u.groups.all() if g.name in Role.values)}
        for u in users]}


class WorkspaceViewSet(agents.WorkspaceViewSet):
    """Everything of agents.WorkspaceViewSet, and members and state."""

    def _managed(self):
        workspace = self.get_object()  # another workspace: 404 before any role is asked
        if not membership.may_manage_members(self.request.user, workspace):
            raise exceptions.PermissionDenied("managing members needs the Workspace admin role in this workspace "
                                              "(provenance.manage_members)")
        return workspace

    def _pickable(self, username: str):
        """The user a Workspace admin may add or remove: one their members picker shows (a user outside it
        is unknown here, as in the admin's picker)."""
        found = membership.pickable_users(self.request.user).filter(username=username).first()
        if found is None:
            raise ApiError(f"unknown user {username!r}", code="not_found", status_code=404)
        return found

    @extend_schema(methods=["get"], summary="The workspace's members with their roles (Workspace admin role)",
                   responses=MembersSerializer)
    @extend_schema(methods=["post"], summary="Add a member, optionally as a role they hold, with a reason "
                   "(Workspace admin role; audited)", request=MemberChangeSerializer,
                   responses={201: MemberChangedSerializer, 200: MemberChangedSerializer})
    @action(detail=True, methods=["get", "post"], url_path="members", pagination_class=None)
    def members(self, request, pk=None):
        workspace = self._managed()
        if request.method == "GET":
            return Response(MembersSerializer(_members(workspace)).data)
        data = views._valid(MemberChangeSerializer, request.data)
        user = self._pickable(data["username"])
        role = data.get("role")
        if role and role not in _roles(user):
            raise ApiError(f"user {user.get_username()!r} does not hold the role {role!r}; roles are granted by "
                           f"a superuser", code="role_not_held", details={"role": role, "roles": _roles(user)})
        added = membership.add_member(workspace=workspace, user=user, actor=request.user, reason=data["reason"],
                                      via=VIA)
        return Response(MemberChangedSerializer(_members(workspace) | {"changed": added}).data,
                        status=201 if added else 200)

    @extend_schema(summary="Remove a member, with a reason (in the body or ?reason=; Workspace admin role; "
                   "audited)", request=views.ReasonSerializer, responses={200: MemberChangedSerializer},
                   parameters=[OpenApiParameter("reason", str, required=False,
                                                description="Why, when the DELETE carries no body.")])
    @action(detail=True, methods=["delete"], url_path=r"members/(?P<username>[^/]+)")
    def remove_member(self, request, pk=None, username=None):
        workspace = self._managed()
        data = request.data if isinstance(request.data, dict) and request.data else request.query_params
        reason = views._valid(views.ReasonSerializer, {"reason": data.get("reason")})["reason"]
        user = self._pickable(username)
        removed = membership.remove_member(workspace=workspace, user=user, actor=request.user, reason=reason, via=VIA)
        return Response(MemberChangedSerializer(_members(workspace) | {"changed": removed}).data)

    @extend_schema(summary="The workspace's current state: active facts, standing decisions, live effects "
                   "(what `manage.py export_state --json` prints)", responses=StateSerializer)
    @action(detail=True, methods=["get"], url_path="state", read_capability="read_sources")
    def state(self, request, pk=None):
        workspace = self.get_object()
        return Response({"workspace": workspace.name} | export_state(workspace=workspace.name))
