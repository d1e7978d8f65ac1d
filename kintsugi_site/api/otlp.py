"""OTLP/HTTP traces in: `POST /api/v1/otlp/v1/traces`, as an OpenTelemetry exporter sends them
(protobuf, or OTLP/JSON), authenticated by a recording token. A thin view over provenance.recording.otel; the
answer is the OTLP ExportTraceServiceResponse in the request's own encoding."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework import parsers

from kintsugi_site.api import agents
from kintsugi_site.api.parsers import JSONParser, too_large
from provenance.recording import otel

PROTOBUF = "application/x-protobuf"


class ProtobufParser(parsers.BaseParser):
    """The body's bytes, refused with 413 past the API's body limit before they are decoded."""

    media_type = PROTOBUF

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise too_large(limit)
        return raw


class TracesView(agents.RecordingView):
    parser_classes = [ProtobufParser, JSONParser]

    @extend_schema(summary="OpenTelemetry GenAI spans in (OTLP/HTTP, protobuf or JSON): recorded as whole "
                   "recordings", request={PROTOBUF: OpenApiTypes.BINARY, "application/json": OpenApiTypes.OBJECT},
                   responses={200: OpenApiTypes.OBJECT}, tags=["recording"], operation_id="otlp_traces")
    def post(self, request):
        if isinstance(request.data, bytes):
            otel.record(token=request.auth, raw=request.data)
            return HttpResponse(ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF)
        otel.record(token=request.auth, json_body=request.data)
        return HttpResponse(json_format.MessageToJson(ExportTraceServiceResponse()), content_type="application/json")
