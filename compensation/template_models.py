"""A workspace's own wording of the one message a customer gets about an incident
(compensation.drafting.customer_message): written by compensation.drafting.templates only, every change audited."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class MessageTemplate(models.Model):
    """The subject and body, with `$placeholders`, that a workspace's customer messages are drafted from."""

    workspace = models.OneToOneField("provenance.Workspace", on_delete=models.CASCADE, related_name="message_template")
    subject = models.CharField(max_length=300)
    body = models.TextField()
    version = models.PositiveIntegerField(default=1, help_text="Counts the saved changes: drafts name the version they used.")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"message template of workspace #{self.workspace_id} (v{self.version})"
