from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from kintsugi_site.api import agents, compensations, decide, effect_kinds, members, otlp, recording_batch, views, webhooks

app_name = "api"

router = DefaultRouter()
router.register("workspaces", members.WorkspaceViewSet, basename="workspace")
router.register("sources", views.SourceViewSet, basename="source")
router.register("incidents", views.IncidentViewSet, basename="incident")
router.register("review-items", views.ReviewItemViewSet, basename="review-item")

# The recording protocol: served by the recording entrance too (kintsugi_site.recording_urls).
recording_urlpatterns = [
    path("recording/actions/", agents.OpenActionView.as_view(), name="recording-open"),
    path("recording/actions/<int:action_id>/", agents.ActionView.as_view(), name="recording-action"),
    path("recording/actions/<int:action_id>/abandon/", agents.AbandonView.as_view(), name="recording-abandon"),
    path("recording/actions/<int:action_id>/calls/", recording_batch.CallsView.as_view(), name="recording-calls"),
    path("recording/batch/", recording_batch.BatchView.as_view(), name="recording-batch"),
    path("recording/effect-kinds/", effect_kinds.RecordingEffectKindsView.as_view(), name="recording-effect-kinds"),
    path("recording/compensations/", compensations.OfferedCompensationsView.as_view(), name="recording-compensations"),
    path("recording/compensations/<int:item_id>/ack/", compensations.AcknowledgeView.as_view(),
         name="recording-compensation-ack"),
    *[path(f"recording/actions/<int:action_id>/{op}/", view.as_view(), name=f"recording-{op}")
      for op, view in agents.CALL_VIEWS.items()],
]

urlpatterns = [
    path("otlp/v1/traces", otlp.TracesView.as_view(), name="otlp-traces"),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[], authentication_classes=[]), name="schema"),
    # The split view serves Swagger UI's start-up script as a file of its own: no inline script, so the
    # Content-Security-Policy needs no exception for it.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema", permission_classes=[]), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema", permission_classes=[]), name="redoc"),
    path("actions/<int:action_id>/explain/", views.ExplainView.as_view(), name="action-explain"),
    *recording_urlpatterns,
    path("sources/<int:pk>/what-if/", decide.WhatIfView.as_view(), name="source-what-if"),
    path("sources/<int:pk>/trust/", decide.SourceTrustView.as_view(), name="source-trust"),
    path("workspaces/<int:pk>/suspicious-sources/", decide.SuspiciousSourcesView.as_view(),
         name="workspace-suspicious-sources"),
    path("workspaces/<int:pk>/effect-kinds/", effect_kinds.WorkspaceEffectKindsView.as_view(),
         name="workspace-effect-kinds"),
    path("workspaces/<int:pk>/actions/<int:action_id>/", decide.ActionAtView.as_view(), name="workspace-action"),
    path("webhooks/stripe/", webhooks.StripeWebhookView.as_view(), name="webhook-stripe"),
    *router.urls,
    re_path(r"^[\s\S]*$", views.NotFoundView.as_view(), name="not-found"),  # any character, newlines too
]
