"""The API's compensation side: review items with their delivery and the effects they compensate, and the
pull protocol's offered compensations and acknowledgements."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from compensation.delivery import approval, deliveries, links
from compensation.delivery import messages as outgoing
from compensation.delivery.acknowledgements import AckOutcome
from compensation.models import CompensationItem
from repairs.not_rerun import not_rerun_actions
from kintsugi_site.api.serializers import FREE_TEXT, StrictSerializer

# --- review items (compensation drafts) -------------------------------------------------------------------
class DeliverySerializer(serializers.Serializer):
    state = serializers.CharField(help_text="queued, retrying, sending, delivered, accepted, submitted, pending, "
                                            "succeeded, failed, canceled, dead, uncertain or awaiting_ack (offered "
                                            "to the team's own agent, agent_pull).")
    connector = serializers.CharField(help_text="sandbox_ledger, outbox, manual, smtp, stripe, webhook or agent_pull.")
    reference = serializers.CharField(help_text="The provider's id: a Stripe refund or invoice, a Message-ID.")
    attempts = serializers.IntegerField()
    failure_reason = serializers.CharField()
    accepted_at = serializers.DateTimeField(allow_null=True)


class CompensatedEffectSerializer(serializers.Serializer):
    """One effect an item compensates (or, for a replacement, releases), as the agent that made it knows it."""

    action_id = serializers.IntegerField(help_text="The action that recorded the effect.")
    effect_id = serializers.IntegerField()
    role = serializers.CharField(help_text="invalidated (it left on a decision now invalid), replacement (the repair "
                                           "produced it and held it) or cancelled (an earlier repair's held replacement).")
    kind = serializers.CharField(help_text="The effect's kind as the agent recorded it: refund, email, store_credit, ...")
    ticket = serializers.CharField(allow_blank=True)
    amount_cents = serializers.IntegerField()
    currency = serializers.CharField()
    idempotency_key = serializers.CharField(
        allow_null=True, help_text="The key the agent sent when it recorded the effect over HTTP; for an effect an "
                                   "in-process agent recorded, the key kintsugi sent it out with (ledger, outbox); "
                                   "null for an effect that never left (a held replacement).")


class MessageSerializer(serializers.Serializer):
    item = serializers.IntegerField()
    kind = serializers.CharField()
    to = serializers.CharField()
    subject = serializers.CharField(allow_blank=True)
    body = serializers.CharField(allow_blank=True)
    content_hash = serializers.CharField()


class ReviewItemSerializer(serializers.ModelSerializer):
    workspace = serializers.CharField(source="incident.workspace.name", read_only=True)
    ticket = serializers.CharField(source="ticket_id", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    path = serializers.ListField(child=serializers.DictField(), read_only=True,
                                 help_text="From the flagged source to the effect this item compensates.")
    original = serializers.ListField(child=serializers.DictField(), read_only=True,
                                     help_text="The effects this item compensates or releases.")
    problems = serializers.ListField(child=serializers.CharField(), read_only=True)
    amount = serializers.CharField(source="amount_display", read_only=True,
                                   help_text='The amount as people read it ("$75.00"); amount_cents is the value.')
    delivery = serializers.SerializerMethodField(help_text="Where the item is on its way out, beside its decision "
                                                           "(null until it is approved).")
    compensates = serializers.SerializerMethodField(help_text="The effects this item compensates (or releases), each "
                                                              "with the idempotency key it went out with.")
    message = serializers.SerializerMethodField(help_text="What leaves, as it leaves: recipient, subject and text "
                                                          "exactly as sent (null for a manual compensation).")
    content_hash = serializers.SerializerMethodField(help_text="SHA-256 of the content an approval binds; send it "
                                                               "back with approve to approve only what you read.")
    not_rerun = serializers.SerializerMethodField(help_text="True: the effect it stands for was made by an action "
                                                           "recorded from an OpenTelemetry trace, which the repair "
                                                           "did not re-run (docs/otel.md): decide whether to reverse it.")

    class Meta:
        model = CompensationItem
        fields = ["id", "incident", "workspace", "kind", "status", "ticket", "customer_email", "to", "subject", "body",
                  "amount_cents", "currency", "amount", "payment_reference", "valid", "problems", "edited", "drafted_by",
                  "path", "original", "decided_by", "decided_at", "decision_reason", "executed_at", "created_at",
                  "delivery", "compensates", "message", "content_hash", "not_rerun"]
        read_only_fields = fields

    @extend_schema_field(DeliverySerializer(allow_null=True))
    def get_delivery(self, item) -> dict | None:
        return deliveries.summary(item)

    @extend_schema_field(MessageSerializer(allow_null=True))
    def get_message(self, item) -> dict | None:
        return None if item.kind == CompensationItem.Kind.MANUAL_COMPENSATION else outgoing.message(item).as_dict()

    def get_content_hash(self, item) -> str:
        return approval.content_hash(item)

    def get_not_rerun(self, item) -> bool:
        # The incident's traced actions once per incident of a page (nearly always none: no item query then).
        taken_out = self.context.setdefault("not_rerun", {})
        if item.incident_id not in taken_out:
            taken_out[item.incident_id] = not_rerun_actions(item.incident)
        ids = taken_out[item.incident_id]
        return bool(ids) and item.effects.filter(action_id__in=ids).exists()

    @extend_schema_field(CompensatedEffectSerializer(many=True))
    def get_compensates(self, item) -> list[dict]:
        # A page's keys come looked up at once in the context (ReviewItemViewSet.list); one item alone here.
        batch = self.context.get("compensates")
        return batch[item.pk] if batch is not None and item.pk in batch else links.compensates([item])[item.pk]


# --- a team's own agent: the compensations offered to it and its answers --------------------------------
class OfferedCompensationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    incident = serializers.IntegerField()
    workspace = serializers.CharField()
    kind = serializers.ChoiceField(choices=CompensationItem.Kind.choices)
    ticket = serializers.CharField()
    customer_email = serializers.CharField()
    to = serializers.CharField(allow_blank=True)
    subject = serializers.CharField(allow_blank=True)
    body = serializers.CharField(allow_blank=True)
    amount_cents = serializers.IntegerField()
    currency = serializers.CharField()
    payment_reference = serializers.CharField(allow_blank=True)
    original = serializers.ListField(child=serializers.DictField(), help_text="The effects as the repair drafted from them.")
    compensates = CompensatedEffectSerializer(many=True)
    idempotency_key = serializers.CharField(help_text="The item's execution key: carry it to your provider, so an "
                                                      "item offered again is performed once.")
    approved_at = serializers.DateTimeField()


class OfferedPageSerializer(serializers.Serializer):
    results = OfferedCompensationSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="The next page's URL (keyset: ?after=<last id>), or null.")


class AckSerializer(StrictSerializer):
    outcome = serializers.ChoiceField(choices=AckOutcome.choices,
                                      help_text="performed: you carried it out (the item is executed); failed: you "
                                                "could not (a person decides what happens next).")
    reference = serializers.CharField(max_length=128, required=False, allow_blank=True,
                                      help_text="Your own id for what you did (a refund id, a message id).")
    message = serializers.CharField(max_length=300, required=False, allow_blank=True, validators=[FREE_TEXT],
                                    help_text="A short note for the reviewers; for a failure, why.")


class AckAnswerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    outcome = serializers.CharField()
    reference = serializers.CharField(allow_blank=True)
    message = serializers.CharField(allow_blank=True)
    delivery_state = serializers.CharField(help_text="delivered or failed")
    item_status = serializers.CharField(help_text="executed after performed; approved after failed")
    acknowledged_at = serializers.DateTimeField(allow_null=True)


class NextCasesSerializer(StrictSerializer):
    count = serializers.IntegerField(min_value=1, max_value=500, help_text="How many cases to take.")
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, validators=[FREE_TEXT])


class NextCasesAnswerSerializer(serializers.Serializer):
    incident = serializers.IntegerField()
    tickets = serializers.ListField(child=serializers.CharField(), help_text="The cases now yours, by ticket.")
    count = serializers.IntegerField()
    why_none = serializers.CharField(allow_blank=True, help_text="Why no case was handed out (empty otherwise).")
    left_in_batch = serializers.IntegerField(help_text="Your cases of the incident that still need a decision.")
    left_in_incident = serializers.IntegerField(help_text="Every case of the incident that still needs one.")
