"""The review notice an incident owes its reviewers (compensation.notices): a durable outbox row, so a
notice whose task the broker refused is still owed, and the sweep sends it."""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class ReviewNotice(models.Model):
    """Owed from the transaction that commits an incident's first drafted items (compensation.drafting.drafts),
    settled in the transaction that records who was told (or that there was nobody to tell). While owed,
    the sweep (compensation.notices.send_owed_notices, on the beat schedule) tries it again at
    `next_attempt_at`, backing off after each attempt that reached nobody."""

    class Outcome(models.TextChoices):
        SENT = "sent", "sent"
        NOBODY = "nobody", "nobody to tell (no reviewer with an address, no mail relay, no webhook)"
        NOTHING = "nothing", "nothing left to review"

    incident = models.OneToOneField("repairs.Incident", on_delete=models.CASCADE, primary_key=True,
                                    related_name="review_notice")
    owed_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # Why the last attempt reached nobody: error classes only (an exception's text may carry an address
    # or a URL with a token).
    last_error = models.CharField(max_length=300, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(settled_at__isnull=True),
                                name="review_notice_owed")]

    def __str__(self) -> str:
        return f"review notice of incident #{self.incident_id}: {self.outcome or 'owed'}"
