"""The recording protocol's batch forms over the API: several calls of one open action in one request,
and a whole finished recording in one request. Thin views over provenance.recording.batch; the shapes are typed
here for the OpenAPI schema (each call is one of the single calls' bodies, told apart by `op`)."""
from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from kintsugi_site.api import agents
from kintsugi_site.api.recording_serializers import REQUESTS
from provenance.recording import batch


def _call_serializer(op: str, base: type[serializers.Serializer]) -> type[serializers.Serializer]:
    name = f"{op.title()}CallSerializer"
    fields = {"op": serializers.ChoiceField(choices=[op], help_text=f"`{op}`: the body of the single {op} call.")}
    return type(name, (base,), fields)


CALL_SERIALIZERS = {op: _call_serializer(op, REQUESTS[op]) for op in batch.CALL_OPS}


def _call_union(many: bool = False) -> PolymorphicProxySerializer:
    return PolymorphicProxySerializer(component_name="RecordingCall", serializers=CALL_SERIALIZERS,
                                      resource_type_field_name="op", many=many)


class RecordingCallsSerializer(serializers.Serializer):
    calls = _call_union(many=True)


class RecordingCallResultsSerializer(serializers.Serializer):
    results = serializers.ListField(child=serializers.DictField(), help_text=(
        "One answer per call, in order, each what the single call answers (an ingest of a quarantined "
        "source: content null, quarantined true and the incident)."))


class RecordingBatchActionSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=64)
    payload = serializers.JSONField(required=False, allow_null=True,
                                    help_text="A root's input; a handoff's is the one its parent recorded.")
    parent = serializers.IntegerField(allow_null=True, required=False,
                                      help_text="The index in `actions` of the action that handed off to this one.")
    calls = _call_union(many=True)


class RecordingBatchSerializer(serializers.Serializer):
    actions = RecordingBatchActionSerializer(many=True, help_text=(
        "Depth-first, as the in-process recorder runs them: each handoff opened after its parent finishes, "
        "the last handoff first. Every action ends with finish."))


class RecordingBatchCommittedSerializer(serializers.Serializer):
    committed = serializers.BooleanField()
    actions = serializers.ListField(child=serializers.IntegerField(), help_text="The actions' ids, in order.")
    results = serializers.ListField(child=serializers.ListField(child=serializers.DictField()),
                                    help_text="Per action, each call's answer, in order.")


def _object(request) -> dict:
    if not isinstance(request.data, dict):
        raise exceptions.ValidationError("a JSON object is needed")
    return request.data


class CallsView(agents.RecordingView):
    @extend_schema(summary="Several calls of one open action, in order, in one request; each answered as alone",
                   request=RecordingCallsSerializer, responses=RecordingCallResultsSerializer, tags=["recording"],
                   operation_id="recording_calls")
    def post(self, request, action_id: int):
        data = _object(request)
        unknown = sorted(set(data) - {"calls"})
        if unknown:
            raise exceptions.ValidationError({name: ["unknown field"] for name in unknown})
        return Response(batch.calls(token=request.auth, action_id=action_id, calls=data.get("calls")))


class BatchView(agents.RecordingView):
    @extend_schema(summary="A whole finished recording in one request: all of it is recorded, or nothing",
                   request=RecordingBatchSerializer, responses={201: RecordingBatchCommittedSerializer}, tags=["recording"],
                   operation_id="recording_batch")
    def post(self, request):
        data = _object(request)
        unknown = sorted(set(data) - {"actions"})
        if unknown:
            raise exceptions.ValidationError({name: ["unknown field"] for name in unknown})
        return Response(batch.record(token=request.auth, actions=data.get("actions")), status=201)
