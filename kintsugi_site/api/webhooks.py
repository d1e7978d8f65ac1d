"""Webhooks providers send: Stripe's events about the refunds and invoices kintsugi created.

No session or token: the `Stripe-Signature` header is the credential, verified against the configured
signing secrets before anything is read (compensation.delivery.provider_events). A body that does not verify is
answered 400 with the error shape and changes nothing."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from compensation.delivery.provider_events import BadSignature, stripe_event
from kintsugi_site.api.errors import error_body


class RawBody(BaseParser):
    """The signature covers the exact bytes, so the view reads them untouched."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read()


class WebhookOutcomeSerializer(serializers.Serializer):
    outcome = serializers.CharField(help_text="applied, unchanged, duplicate, unknown object, another workspace "
                                              "or ignored.")


class StripeWebhookView(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [RawBody]
    throttle_classes: list = []

    @extend_schema(summary="Stripe's signed events about refunds and invoices kintsugi created",
                   request={"application/json": {"type": "object"}},
                   responses={200: WebhookOutcomeSerializer, 400: OpenApiResponse(description="No valid Stripe-Signature.")})
    def post(self, request):
        try:
            outcome = stripe_event(payload=request.body, signature=request.headers.get("Stripe-Signature"))
        except BadSignature as e:
            return Response(error_body("bad_signature", str(e)), status=400)
        return Response({"outcome": outcome})
