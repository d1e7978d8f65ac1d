"""The incident's `not_rerun`: actions recorded from OpenTelemetry traces that its repair took out instead
of re-running (repairs.not_rerun), with the review items their effects became."""
from __future__ import annotations

from rest_framework import serializers


class NotRerunSerializer(serializers.Serializer):
    actions = serializers.IntegerField(help_text="Traced actions taken out, not re-run.")
    action_ids = serializers.ListField(child=serializers.IntegerField(), help_text="The first 50 of them.")
    agents = serializers.ListField(child=serializers.CharField())
    effects = serializers.IntegerField(help_text="Their effects, each invalidated and drafted as a review item.")
    items = serializers.IntegerField(help_text="Review items drafted from those effects, marked not re-run.")
    item_ids = serializers.ListField(child=serializers.IntegerField(), help_text="The first 50 of them.")
    text = serializers.CharField(help_text="What the incident says of them, in words.")
