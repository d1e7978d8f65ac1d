from django.conf import settings
from django.db import models

from provenance.placement import new_workspace_server


class Workspace(models.Model):
    """One support desk: its own provenance graph, baseline graph, tickets and sources."""

    name = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="workspaces")
    run_number = models.PositiveIntegerField(default=0, help_text="Increments each time a desk run replaces the graph.")
    run_params = models.JSONField(default=dict, blank=True)
    action_count = models.PositiveIntegerField(default=0)
    falkordb_server = models.CharField(
        "FalkorDB server", max_length=255, blank=True, editable=False, default=new_workspace_server,
        help_text="host:port of the FalkorDB server holding this workspace's graph, baseline and model cache "
                  "(empty: the default server). Chosen at creation; changed only by `manage.py move_workspace`.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_members", "Can add and remove members of the workspaces one belongs to")]

    def __str__(self) -> str:
        return self.name


class Source(models.Model):
    """An outside document (a policy page) that agents ingest."""

    class Trust(models.TextChoices):
        # Ordered from least to most trusted: a fact is as trusted as the least trusted thing it came from.
        UNTRUSTED = "untrusted"
        UNKNOWN = "unknown"
        TRUSTED = "trusted"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="sources")
    source_id = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True)
    content = models.TextField()
    trust = models.CharField(max_length=16, choices=Trust.choices, default=Trust.UNKNOWN,
                             help_text="Set by a lead (provenance.trust.set_source_trust); facts inherit the lowest "
                                       "trust of what they came from.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workspace", "source_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "source_id"], name="source_unique_per_workspace")]

    def __str__(self) -> str:
        return self.source_id


class Ticket(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="tickets")
    ticket_id = models.CharField(max_length=32)
    customer_name = models.CharField(max_length=200)
    customer_email = models.EmailField()
    subject = models.CharField(max_length=300)
    body = models.TextField()
    amount_cents = models.PositiveIntegerField(help_text="What the customer paid for the order.")
    currency = models.CharField(max_length=3, default="USD")
    tier = models.CharField(max_length=16, default="standard", help_text="Tier in the customer record (vip or standard).")
    payment_reference = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["workspace", "ticket_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "ticket_id"], name="ticket_unique_per_workspace")]

    def __str__(self) -> str:
        return self.ticket_id

    def as_payload(self) -> dict:
        return {
            "ticket": self.ticket_id,
            "customer": self.customer_name,
            "email": self.customer_email,
            "subject": self.subject,
            "body": self.body,
            "amount_cents": self.amount_cents,
            "currency": self.currency,
            "tier": self.tier,
            "payment_reference": self.payment_reference,
        }


class LedgerEntry(models.Model):
    """The sandbox ledger: money the refund agent paid out, and reversal requests people approved."""

    class Kind(models.TextChoices):
        PAYMENT = "payment"
        REVERSAL_REQUEST = "reversal_request"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="ledger")
    run_number = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=Kind.choices, default=Kind.PAYMENT)
    ticket_id = models.CharField(max_length=32)
    amount_cents = models.IntegerField()
    currency = models.CharField(max_length=3)
    effect_id = models.BigIntegerField(null=True, blank=True)
    reference = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "ledger entries"


class OutboxEmail(models.Model):
    """Email that left through Django's email framework (the outbox backend)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.SET_NULL, null=True, blank=True, related_name="outbox")
    run_number = models.PositiveIntegerField(null=True, blank=True)
    to = models.CharField(max_length=300)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    effect_id = models.BigIntegerField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=128, unique=True, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
