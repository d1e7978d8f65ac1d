"""Effect kinds declared by the agent's side (provenance.access.effect_declarations): a Workspace admin
declares them on the workspace, a recording token declares them for its own workspace. Thin views."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import get_object_or_404
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from kintsugi_site.api import views
from kintsugi_site.api.agents import RecordingView
from provenance.access import effect_declarations
from provenance.models import EffectKindDeclaration

VIA = views.VIA


class EffectKindSerializer(serializers.ModelSerializer):
    class Meta:
        model = EffectKindDeclaration
        fields = ["name", "money", "target", "compensation", "decides", "declared_by", "declared_at"]


class DeclareEffectKindSerializer(views.ReasonSerializer):
    name = serializers.CharField(max_length=64, help_text="The kind the agents record (`rec.effect(name, ...)`).")
    money = serializers.BooleanField(default=False, help_text="The effect's `amount` (integer cents) and `currency` "
                                                              "are money that left.")
    target = serializers.CharField(max_length=64, required=False, allow_blank=True, default="",
                                   help_text="The details key naming what it acts on (required when recorded).")
    compensation = serializers.ChoiceField(choices=EffectKindDeclaration.Compensation.choices, help_text=(
        "`reversed`: a reversal request, netted per ticket like a refund (money only); `manual`: a person "
        "compensates it by hand, the item carries its amount; `message`: one correction email (to/subject/body "
        "required when recorded)."))
    decides = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                    help_text="What a reviewer decides on its items, in their words.")


def _declare(request, workspace, *, token=None) -> Response:
    data = views._valid(DeclareEffectKindSerializer, request.data)
    row, created = effect_declarations.declare_effect_kind(
        workspace=workspace, name=data["name"], money=data["money"], target=data["target"],
        compensation=data["compensation"], decides=data["decides"], actor=request.user, token=token,
        reason=data["reason"], via=VIA)
    return Response(EffectKindSerializer(row).data, status=201 if created else 200)


class WorkspaceEffectKindsView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(summary="The effect kinds the workspace's agents declared", responses=EffectKindSerializer(many=True),
                   tags=["workspaces"])
    def get(self, request, pk: int):
        ws = get_object_or_404(views._visible(request), pk=pk)
        return Response(EffectKindSerializer(ws.effect_kinds.all(), many=True).data)

    @extend_schema(summary="Declare (or change) how an effect kind of the workspace is compensated (Workspace admin)",
                   request=DeclareEffectKindSerializer, responses={201: EffectKindSerializer, 200: EffectKindSerializer},
                   tags=["workspaces"])
    def post(self, request, pk: int):
        return _declare(request, get_object_or_404(views._visible(request), pk=pk))


class RecordingEffectKindsView(RecordingView):
    @extend_schema(summary="The effect kinds this token's workspace declared", responses=EffectKindSerializer(many=True),
                   tags=["recording"], operation_id="recording_effect_kinds_list")
    def get(self, request):
        return Response(EffectKindSerializer(request.auth.workspace.effect_kinds.all(), many=True).data)

    @extend_schema(summary="Declare (or change) how an effect kind this agent records is compensated",
                   request=DeclareEffectKindSerializer, responses={201: EffectKindSerializer, 200: EffectKindSerializer},
                   tags=["recording"], operation_id="recording_effect_kinds_declare")
    def post(self, request):
        return _declare(request, request.auth.workspace, token=request.auth)
