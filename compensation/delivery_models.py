"""Where an approved item goes after its decision: the connector a workspace chose for each item kind,
the item's delivery (its state at the provider, beside its decision state) and every attempt made.

Secrets are never stored here: a connector's options name the environment variables (or files) that
hold its keys (compensation.delivery.connectors.config)."""
from __future__ import annotations

from django.db import models


class DeliveryState(models.TextChoices):
    QUEUED = "queued", "queued"
    RETRYING = "retrying", "retrying after a temporary failure"
    SENDING = "sending", "sending"
    DELIVERED = "delivered", "delivered"
    ACCEPTED = "accepted", "accepted by the mail server"
    SUBMITTED = "submitted", "submitted"
    PENDING = "pending", "pending at the provider"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELED = "canceled", "canceled"
    DEAD = "dead", "gave up after its last try"
    UNCERTAIN = "uncertain", "uncertain: the worker stopped while the provider answered"
    # A team that performs its own effects (compensation.delivery.connectors.agent_pull): offered to its agent,
    # which pulls it and answers performed (delivered) or failed; until then nothing has left.
    AWAITING_ACK = "awaiting_ack", "awaiting acknowledgement"

    @classmethod
    def settled(cls) -> frozenset[str]:
        """States after which the item has left (the decision is carried out, whatever follows)."""
        return frozenset({cls.DELIVERED, cls.ACCEPTED, cls.SUBMITTED, cls.PENDING, cls.SUCCEEDED})

    @classmethod
    def needs_person(cls) -> frozenset[str]:
        """States no retry will change: a person decides what happens next."""
        return frozenset({cls.FAILED, cls.CANCELED, cls.DEAD, cls.UNCERTAIN})


def delivery_needs_person(item) -> bool:
    """The item's delivery failed in a way no retry changes (reads a select_related delivery)."""
    try:
        return item.delivery.state in DeliveryState.needs_person()
    except Delivery.DoesNotExist:
        return False


class WorkspaceConnector(models.Model):
    """Which connector delivers one item kind in one workspace (unset: the deployment's default)."""

    workspace = models.ForeignKey("provenance.Workspace", on_delete=models.CASCADE, related_name="connectors")
    kind = models.CharField(max_length=24)
    connector = models.CharField(max_length=32)
    options = models.JSONField(default=dict, blank=True,
                               help_text="Non-secret settings (a webhook URL, the names of the variables holding keys).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "kind"], name="connector_one_per_kind")]

    def __str__(self) -> str:
        return f"{self.kind} → {self.connector}"


class Delivery(models.Model):
    """One approved item's way out: the connector, the provider's reference and its last known state."""

    item = models.OneToOneField("compensation.CompensationItem", on_delete=models.PROTECT, related_name="delivery")
    connector = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.QUEUED)
    reference = models.CharField(max_length=128, blank=True, help_text="The provider's id (refund, invoice, message).")
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.CharField(max_length=300, blank=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["connector", "reference"], name="delivery_reference"),
                   models.Index(fields=["state"], name="delivery_state")]

    def __str__(self) -> str:
        return f"item #{self.item_id} via {self.connector}: {self.state}"


class DeliveryAttempt(models.Model):
    """Each try: when, how long, what the provider answered (a status code, never its free text)."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=16, choices=DeliveryState.choices)
    status_code = models.IntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["delivery", "at", "pk"]


class ProviderEvent(models.Model):
    """A provider's webhook event, kept once by its id: a replayed event changes nothing twice."""

    provider = models.CharField(max_length=16)
    event_id = models.CharField(max_length=128)
    type = models.CharField(max_length=64)
    delivery = models.ForeignKey(Delivery, on_delete=models.SET_NULL, null=True, blank=True, related_name="events")
    outcome = models.CharField(max_length=32)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "event_id"], name="provider_event_once")]
