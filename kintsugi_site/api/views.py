"""Thin views: parse the request, call one service or selector, render the result. Errors from the
services are mapped to statuses in kintsugi_site.api.errors, never caught here.

Tenancy: every queryset starts from the workspaces the caller is a member of, so anything in another
workspace answers 404, exactly as if it did not exist."""
from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from kintsugi_site import prov_export, reports
from repairs import deep_check
from kintsugi_site.api.errors import ApiError
from compensation.delivery import links as compensation_links
from compensation.review import selectors as compensation_selectors
from compensation.review import assignments, services as compensation_services
from compensation.models import CompensationItem
from kintsugi_site.api.permissions import MayRetryIncidents
from kintsugi_site.api.compensation_serializers import NextCasesAnswerSerializer, NextCasesSerializer, ReviewItemSerializer
from kintsugi_site.api.serializers import (
    ApproveSerializer,
    MAX_BLAST_RADIUS_PAGE,
    BlastRadiusQuerySerializer,
    BlastRadiusSerializer,
    ExplainQuerySerializer,
    ExplainSerializer,
    FactHistorySerializer,
    FactQuerySerializer,
    IncidentReportQuerySerializer,
    IncidentSerializer,
    ReasonSerializer,
    SourceDetailSerializer,
    SourceSerializer,
    WorkspaceDetailSerializer,
    WorkspaceSerializer,
)
from kintsugi_site.api.throttles import ExpensiveEndpointThrottle
from provenance.recording import selectors as provenance_selectors, time_travel
from provenance.access import tenancy
from provenance import validation
from provenance.models import Source
from repairs import explain as repair_explain, services as repair_services
from repairs.models import Incident, open_incident_id

VIA = Incident.Via.API


def _valid(serializer_class, data) -> dict:
    """The validated query parameters or body; a 400 with field details otherwise."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _visible(request):
    return tenancy.visible_workspaces(user=request.user)


def _int_filter(request, name: str) -> int | None:
    """An integer id filter; absent is None, anything else that is not a whole number is a 400 (an
    empty value included: the schema declares an integer)."""
    value = request.query_params.get(name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        raise ApiError(f"{name} must be an integer id", code="invalid", details={name: value[:40]}) from None
    return int(value)


def _text_filter(request, name: str, *, max_length: int) -> str | None:
    """A string filter (ticket, source): absent is None; empty, over the column's length or holding a
    control character (a NUL Postgres would refuse mid-query) is a 400."""
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        return validation.identifier(value, field=name, max_length=max_length)
    except validation.InvalidInput as exc:
        raise ApiError(str(exc), code="invalid", details={name: str(exc)}) from None


def _choice_filter(request, name: str, choices) -> str | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if value not in choices:
        raise ApiError(f"{name} must be one of {', '.join(choices)}", code="invalid", details={name: value[:40]})
    return value


# The filters' schemas say what _int_filter and _text_filter accept, so the schema and the 400s agree.
ID_SCHEMA = {"type": "integer", "minimum": 0, "maximum": 10 ** 18 - 1}
NO_CONTROL_CHARACTERS = r"^[^\x00-\x1f\x7f-\x9f]+$"


def text_filter_schema(max_length: int) -> dict:
    return {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": NO_CONTROL_CHARACTERS}


WORKSPACE_FILTER = OpenApiParameter("workspace", ID_SCHEMA, description="Only this workspace (its id).")


# --- workspaces -----------------------------------------------------------------------------------------
@extend_schema_view(list=extend_schema(summary="Workspaces the caller is a member of"),
                    retrieve=extend_schema(summary="A workspace with its counts"))
class WorkspaceViewSet(viewsets.ReadOnlyModelViewSet):
    read_capability = None  # membership is what lets a user see a workspace
    def get_queryset(self):
        return _visible(self.request).order_by("name")

    def get_serializer_class(self):
        return WorkspaceDetailSerializer if self.action == "retrieve" else WorkspaceSerializer

    @extend_schema(summary="The history of a fact with its three clocks", parameters=[FactQuerySerializer],
                   responses=FactHistorySerializer)
    @action(detail=True, methods=["get"], url_path=r"facts/(?P<key>.+)", read_capability="read_sources")
    def facts(self, request, pk=None, key=None):
        # Any character in the key, `/` included (KintsugiStore's keys are paths): the path converter is
        # greedy up to the route's final slash, and an encoded %2F reaches it decoded, so both spellings work.
        workspace = self.get_object()
        try:
            validation.fact_key(key)
        except validation.InvalidInput as exc:
            raise ApiError(str(exc), code="invalid", details={"key": str(exc)}) from None
        q = _valid(FactQuerySerializer, request.query_params)
        versions = time_travel.fact_page(workspace=workspace, key=key)["versions"]  # a 404 when there are none
        as_of = q.get("as_of")
        if q.get("as_of_action"):
            as_of = time_travel.ran_at(workspace=workspace, action_id=q["as_of_action"])
        held = provenance_selectors.version_as_of(versions, at=as_of, clock=q["clock"]) if as_of else None
        return Response(FactHistorySerializer({
            "workspace": workspace.name, "key": key, "clock": q["clock"], "as_of": as_of,
            "as_of_action": q.get("as_of_action"), "value_as_of": held, "versions": versions}).data)


# --- sources --------------------------------------------------------------------------------------------
@extend_schema_view(list=extend_schema(summary="Sources (outside documents the agents ingested)",
                                       parameters=[WORKSPACE_FILTER]),
                    retrieve=extend_schema(summary="A source with its content"))
class SourceViewSet(viewsets.ReadOnlyModelViewSet):
    read_capability = "read_sources"
    throttle_scope = None  # set per action: the expensive ones are throttled by their own scope

    def get_queryset(self):
        qs = (Source.objects.filter(workspace__in=_visible(self.request)).select_related("workspace")
              .annotate(open_incident_id=open_incident_id()))
        workspace = _int_filter(self.request, "workspace") if self.action == "list" else None
        return qs.filter(workspace_id=workspace) if workspace else qs

    def get_serializer_class(self):
        return SourceDetailSerializer if self.action == "retrieve" else SourceSerializer

    @extend_schema(summary="Flag a bad source: opens an incident and starts its repair", request=ReasonSerializer,
                   responses={201: IncidentSerializer,
                              409: OpenApiResponse(description="The source already has an open incident "
                                                               "(details.incident names it)")})
    @action(detail=True, methods=["post"], throttle_classes=[ExpensiveEndpointThrottle], throttle_scope="flag")
    def flag(self, request, pk=None):
        source = self.get_object()
        reason = _valid(ReasonSerializer, request.data)["reason"]
        incident = repair_services.flag_source(workspace=source.workspace, source_id=source.source_id,
                                               actor=request.user, reason=reason, via=VIA)
        return Response(IncidentSerializer(incident).data, status=201,
                        headers={"Location": reverse("api:incident-detail", args=[incident.pk], request=request)})

    @extend_schema(summary="Preview what flagging this source would touch (paged)",
                   parameters=[BlastRadiusQuerySerializer], responses=BlastRadiusSerializer)
    @action(detail=True, methods=["get"], url_path="blast-radius", throttle_classes=[ExpensiveEndpointThrottle],
            throttle_scope="blast_radius")
    def blast_radius(self, request, pk=None):
        source = self.get_object()
        asked = request.query_params.get("limit", "")
        if asked.isdigit() and int(asked) > MAX_BLAST_RADIUS_PAGE:  # its own code: the caller should page
            raise ApiError(f"limit {int(asked)} is over the hard cap of {MAX_BLAST_RADIUS_PAGE} actions per page; "
                           f"page through the radius with offset", code="limit_over_cap",
                           details={"limit": int(asked), "max_limit": MAX_BLAST_RADIUS_PAGE})
        q = _valid(BlastRadiusQuerySerializer, request.query_params)
        limit, offset = q["limit"], q["offset"]
        radius = provenance_selectors.blast_radius(workspace=source.workspace, source=source.source_id,
                                                   limit=limit, offset=offset)
        url = request.build_absolute_uri(request.path)
        more = offset + limit < radius["size"]
        return Response(BlastRadiusSerializer(radius | {
            "source_pk": source.pk, "workspace": source.workspace.name, "limit": limit, "offset": offset,
            "next": f"{url}?limit={limit}&offset={offset + limit}" if more else None,
            "previous": f"{url}?limit={limit}&offset={max(offset - limit, 0)}" if offset else None,
        }).data)


# --- incidents ------------------------------------------------------------------------------------------
class FileDownloadNegotiation(BaseContentNegotiation):
    """The report's `?format=` names the file format, not a DRF renderer: never negotiate on it."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


@extend_schema_view(
    list=extend_schema(summary="Incidents, newest first", parameters=[
        WORKSPACE_FILTER,
        OpenApiParameter("status", OpenApiTypes.STR, enum=Incident.Status.values),
        OpenApiParameter("source", text_filter_schema(validation.SOURCE_ID_MAX),
                         description="Only incidents of this source_id.")]),
    retrieve=extend_schema(summary="An incident: status, progress, counts, verification"))
class IncidentViewSet(viewsets.ReadOnlyModelViewSet):
    read_capability = "read_incidents"
    serializer_class = IncidentSerializer
    throttle_scope = None

    def get_queryset(self):
        qs = (Incident.objects.filter(workspace__in=_visible(self.request))
              .select_related("workspace", "flagged_by").prefetch_related("phase_marks")
              .order_by("-created_at", "-pk"))
        if self.action != "list":
            return qs
        workspace = _int_filter(self.request, "workspace")
        if workspace:
            qs = qs.filter(workspace_id=workspace)
        status = _choice_filter(self.request, "status", Incident.Status.values)
        if status:
            qs = qs.filter(status=status)
        source = _text_filter(self.request, "source", max_length=validation.SOURCE_ID_MAX)
        if source:
            qs = qs.filter(source_id=source)
        return qs

    @extend_schema(summary="Send a failed or blocked repair back to the worker", request=ReasonSerializer,
                   responses={200: IncidentSerializer})
    @action(detail=True, methods=["post"], permission_classes=[MayRetryIncidents])
    def retry(self, request, pk=None):
        incident = self.get_object()
        reason = _valid(ReasonSerializer, request.data)["reason"]
        incident = repair_services.retry_incident(incident=incident, actor=request.user, reason=reason, via=VIA)
        return Response(IncidentSerializer(incident).data)

    @extend_schema(summary="Replay the whole desk without the flagged sources and diff (in a worker)",
                   description="A repair verifies what its flagged source could change; this replays the whole "
                               "desk as an audit. The result lands in the incident's verification (`full`) and "
                               "history; one that differs puts a repaired incident in need of attention.",
                   request=ReasonSerializer, responses={202: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="verify-full", permission_classes=[MayRetryIncidents],
            throttle_classes=[ExpensiveEndpointThrottle], throttle_scope="report")
    def verify_full(self, request, pk=None):
        incident = self.get_object()
        reason = _valid(ReasonSerializer, request.data)["reason"]
        deep_check.request_full_verification(incident=incident, actor=request.user, reason=reason, via=VIA)
        return Response({"incident": incident.pk, "queued": True}, status=202)

    @extend_schema(summary="Take the next cases of the incident that nobody holds (Reviewer role)",
                   request=NextCasesSerializer, responses={200: NextCasesAnswerSerializer})
    @action(detail=True, methods=["post"], url_path="next-cases")
    def next_cases(self, request, pk=None):
        data = _valid(NextCasesSerializer, request.data)
        batch = assignments.next_batch(incident=self.get_object(), actor=request.user, count=data["count"],
                                       reason=data.get("reason", ""), via=VIA)
        return Response({"incident": batch.incident_id, "tickets": batch.tickets, "count": batch.count,
                         "why_none": batch.why_none, "left_in_batch": batch.left_in_batch,
                         "left_in_incident": batch.left_in_incident})

    @extend_schema(summary="Download the incident report", parameters=[IncidentReportQuerySerializer],
                   description="format=json: the report as JSON; csv: its tables as CSV files in a zip; "
                               "pdf: the printable report.",
                   responses={(200, "application/json"): OpenApiTypes.OBJECT,
                              (200, "application/zip"): OpenApiTypes.BINARY,
                              (200, "application/pdf"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"], content_negotiation_class=FileDownloadNegotiation,
            throttle_classes=[ExpensiveEndpointThrottle], throttle_scope="report")
    def report(self, request, pk=None):
        incident = self.get_object()
        _choice_filter(request, "format", ["json", "csv", "pdf"])  # an empty format= is not "json"
        fmt = _valid(IncidentReportQuerySerializer, request.query_params)["format"]
        body, content_type, filename = reports.render_report(incident, fmt)
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    @extend_schema(summary="The incident's provenance as W3C PROV (docs/prov.md)",
                   parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "ttl"],
                                                description="json: PROV-JSON (the default); ttl: PROV-O as Turtle.")],
                   responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/turtle"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"], url_path="prov", content_negotiation_class=FileDownloadNegotiation,
            throttle_classes=[ExpensiveEndpointThrottle], throttle_scope="report")
    def prov(self, request, pk=None):
        incident = self.get_object()
        fmt = _choice_filter(request, "format", list(prov_export.FORMATS)) or "json"
        body, content_type, filename = prov_export.render(incident, fmt)
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


# --- review items -----------------------------------------------------------------------------------------
@extend_schema_view(
    list=extend_schema(summary="The review queue: compensation drafts, pending first", parameters=[
        WORKSPACE_FILTER,
        OpenApiParameter("incident", ID_SCHEMA, description="Only this incident's items."),
        OpenApiParameter("status", OpenApiTypes.STR, enum=CompensationItem.Status.values),
        OpenApiParameter("kind", OpenApiTypes.STR, enum=CompensationItem.Kind.values),
        OpenApiParameter("ticket", text_filter_schema(validation.TICKET_ID_MAX))]),
    retrieve=extend_schema(summary="A review item: the draft, what it compensates and how it was decided"))
class ReviewItemViewSet(viewsets.ReadOnlyModelViewSet):
    """Approve and reject call the compensation services, which enforce the Reviewer role and four-eyes
    (never the flagger of the item's incident) and record refusals in the audit trail themselves."""

    read_capability = "read_items"
    serializer_class = ReviewItemSerializer

    def get_queryset(self):
        qs = (compensation_selectors.review_queue().filter(incident__workspace__in=_visible(self.request))
              .select_related("delivery"))
        if self.action != "list":
            return qs
        for name, field in (("workspace", "incident__workspace_id"), ("incident", "incident_id")):
            value = _int_filter(self.request, name)
            if value:
                qs = qs.filter(**{field: value})
        for name, choices in (("status", CompensationItem.Status.values), ("kind", CompensationItem.Kind.values)):
            value = _choice_filter(self.request, name, choices)
            if value:
                qs = qs.filter(**{name: value})
        ticket = _text_filter(self.request, "ticket", max_length=validation.TICKET_ID_MAX)
        if ticket:
            qs = qs.filter(ticket_id=ticket)
        return qs

    def list(self, request, *args, **kwargs):
        # What each item compensates is looked up for the whole page at once, not per item.
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = self.get_serializer_context() | {"compensates": compensation_links.compensates(page)}
        return self.get_paginated_response(self.get_serializer_class()(page, many=True, context=context).data)

    @extend_schema(summary="Approve a draft, optionally edited first (Reviewer role; not the incident's flagger)",
                   request=ApproveSerializer,
                   responses={200: ReviewItemSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        item = self.get_object()
        data = _valid(ApproveSerializer, request.data)
        item = compensation_services.approve_item(item=item, actor=request.user, reason=data.get("reason", ""),
                                                  via=VIA, edits=data.get("edits") or None,
                                                  shown=data.get("content_hash") or None)
        return Response(ReviewItemSerializer(item).data)

    @extend_schema(summary="Reject a draft, with a reason (Reviewer role; not the incident's flagger)",
                   request=ReasonSerializer, responses={200: ReviewItemSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        item = self.get_object()
        reason = _valid(ReasonSerializer, request.data)["reason"]
        item = compensation_services.reject_item(item=item, actor=request.user, reason=reason, via=VIA)
        return Response(ReviewItemSerializer(item).data)


# --- explain --------------------------------------------------------------------------------------------
class ExplainView(APIView):
    read_capability = "read_sources"
    throttle_classes = [ExpensiveEndpointThrottle]
    throttle_scope = "explain"

    @extend_schema(summary="The path from a source to an action: why the action depends on the source",
                   parameters=[ExplainQuerySerializer], responses=ExplainSerializer)
    def get(self, request, action_id: int):
        source_pk = _valid(ExplainQuerySerializer, request.query_params)["source"]
        source = get_object_or_404(Source.objects.filter(workspace__in=_visible(request)).select_related("workspace"),
                                   pk=source_pk)
        steps = repair_explain.explain_action(workspace=source.workspace, source=source.source_id,
                                                action_id=action_id)
        if not steps:
            raise ApiError(f"action {action_id} does not depend on source {source.source_id!r}", code="no_path",
                           status_code=404)
        return Response(ExplainSerializer({"workspace": source.workspace.name, "source": source.source_id,
                                           "action": action_id, "steps": steps}).data)


class NotFoundView(APIView):
    """Any other path under /api/v1/: a JSON 404 instead of Django's HTML page."""

    permission_classes = [AllowAny]
    authentication_classes = []
    schema = None  # not an endpoint: left out of the OpenAPI schema

    def get(self, request, *args, **kwargs):
        raise ApiError(f"no API endpoint at {request.path}", code="not_found", status_code=404)

    post = put = patch = delete = get
