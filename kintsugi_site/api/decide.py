"""Deciding before flagging, over the API: a source's what-if, the sources worth a look in a workspace,
a source's trust, and an action's reads when it ran beside now. Thin views over repairs.what_if,
repairs.suspicious, provenance.access.trust and provenance.recording.time_travel; every lookup starts from the caller's
visible workspaces (another workspace's source, workspace or action answers 404)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from kintsugi_site.api.serializers import (
    OutcomeCountsSerializer,
    ReasonSerializer,
    SourceSerializer,
    StrictSerializer,
)
from kintsugi_site.api.throttles import ExpensiveEndpointThrottle
from provenance.access import tenancy, trust
from provenance.recording import time_travel
from provenance.models import Source
from repairs.models import Incident
from repairs.suspicious import suspicious_sources
from repairs.what_if import what_if


class TicketChangeSerializer(serializers.Serializer):
    ticket = serializers.CharField()
    action_id = serializers.IntegerField()
    agent = serializers.CharField()
    before = serializers.JSONField()
    after = serializers.JSONField()


class WhatIfItemSerializer(serializers.Serializer):
    kind = serializers.CharField()
    ticket = serializers.CharField()
    amount_cents = serializers.IntegerField()
    currency = serializers.CharField()
    situation = serializers.CharField()
    valid = serializers.BooleanField()


class PreviewedVersionSerializer(serializers.Serializer):
    key = serializers.CharField()
    version = serializers.IntegerField()


class ContainmentPreviewSerializer(serializers.Serializer):
    facts = serializers.IntegerField(help_text="Fact versions the flag would contain at once.")
    sample = PreviewedVersionSerializer(many=True, help_text="The first fifty of them, by key and version.")


class WhatIfSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    source = serializers.CharField()
    fingerprint = serializers.CharField(help_text="The desk this what-if holds for; any change to the desk changes it.")
    blast_radius = serializers.IntegerField()
    counts = OutcomeCountsSerializer(help_text="The six outcome counts, meaning what flag_source reports.")
    effects_invalidated = serializers.IntegerField()
    effects_by_kind = serializers.DictField(child=serializers.IntegerField())
    compensations = serializers.IntegerField(help_text="Review items that would compensate invalidated effects.")
    amount_reversed = serializers.DictField(child=serializers.IntegerField(),
                                            help_text="Money that would be asked back, in cents per currency.")
    amount_paid = serializers.DictField(child=serializers.IntegerField(),
                                        help_text="Corrected refunds that would wait for approval, in cents per currency.")
    tickets_changed = TicketChangeSerializer(many=True)
    items = WhatIfItemSerializer(many=True)
    containment = ContainmentPreviewSerializer(
        help_text="What the flag would contain at once: live reads resolve around these versions until the repair lands.")


class SuggestionSerializer(serializers.Serializer):
    source = serializers.CharField()
    score = serializers.FloatField()
    reasons = serializers.ListField(child=serializers.CharField())


class SuspiciousSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    sources = SuggestionSerializer(many=True, help_text="Best first. A suggestion, never a flag.")


class ActionPageSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    action = serializers.IntegerField()
    agent = serializers.CharField()
    seq = serializers.FloatField()
    ticket = serializers.CharField(allow_null=True)
    status = serializers.CharField()
    ran_at = serializers.CharField(allow_null=True, help_text="When the action ran (recorded).")
    incident = serializers.IntegerField(allow_null=True, help_text="The incident that last repaired it.")
    decision = serializers.JSONField()
    decision_before_repair = serializers.JSONField()
    facts = serializers.JSONField(help_text="Per fact read: the version seen when it ran, the version its latest run "
                                            "reads, and on each clock (known, valid, system) the version then and now.")


class TrustSerializer(StrictSerializer, ReasonSerializer):
    trust = serializers.ChoiceField(choices=Source.Trust.choices, help_text="How far the source is trusted.")


class SourceTrustView(APIView):
    """A source's trust, as its admin page sets it: the source among the caller's workspaces (404),
    then the Support lead role (403), then the body (400); provenance.access.trust.set_source_trust checks
    the same again and writes the `source.trust_set` audit event."""

    basename = "source"  # what a refusal's audit event names as its subject

    @extend_schema(summary="Set how far a source is trusted, with a reason (Support lead role)",
                   request=TrustSerializer, responses={200: SourceSerializer})
    def post(self, request, pk: int):
        source = get_object_or_404(Source.objects.filter(workspace__in=tenancy.visible_workspaces(user=request.user))
                                   .select_related("workspace"), pk=pk)
        trust.check_may_set_trust(request.user)  # refused before the body is read, as the role decides
        body = TrustSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        source = trust.set_source_trust(source=source, level=body.validated_data["trust"], actor=request.user,
                                        reason=body.validated_data["reason"], via=Incident.Via.API)
        return Response(SourceSerializer(source, context={"request": request}).data)


class WhatIfView(APIView):
    """Flagging's exact outcome before flagging: a Support lead's question (it runs the repair walk)."""

    read_capability = "flag"
    throttle_classes = [ExpensiveEndpointThrottle]
    throttle_scope = "what_if"

    @extend_schema(summary="What flagging this source would do, without doing it (the exact repair outcome)",
                   responses=WhatIfSerializer)
    def get(self, request, pk: int):
        source = get_object_or_404(Source.objects.filter(workspace__in=tenancy.visible_workspaces(user=request.user))
                                   .select_related("workspace"), pk=pk)
        result = what_if(workspace=source.workspace, source=source.source_id, actor=request.user, via=Incident.Via.API)
        return Response(WhatIfSerializer(result.to_json()).data)


class SuspiciousSourcesView(APIView):
    read_capability = "read_sources"
    throttle_classes = [ExpensiveEndpointThrottle]
    throttle_scope = "what_if"  # it runs a few what-ifs

    @extend_schema(summary="Sources worth a look, best first, each with plain reasons (never a flag)",
                   responses=SuspiciousSerializer)
    def get(self, request, pk: int):
        workspace = get_object_or_404(tenancy.visible_workspaces(user=request.user), pk=pk)
        ranked = suspicious_sources(workspace=workspace)
        return Response(SuspiciousSerializer({"workspace": workspace.name,
                                              "sources": [s.to_json() for s in ranked]}).data)


class ActionAtView(APIView):
    read_capability = "read_sources"

    @extend_schema(summary="An action: when it ran, what it read then, and what holds now on each clock",
                   responses=ActionPageSerializer)
    def get(self, request, pk: int, action_id: int):
        workspace = get_object_or_404(tenancy.visible_workspaces(user=request.user), pk=pk)
        return Response(ActionPageSerializer(time_travel.action_page(workspace=workspace, action_id=action_id)).data)
