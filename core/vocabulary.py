"""The words every layer shares: where a change came from (`Via`). Kept at the bottom so the audit
record, the services and the entry points name the same values without importing each other."""
from django.db import models


class Via(models.TextChoices):
    ADMIN = "admin"
    API = "api"
    CLI = "cli"
    MCP = "mcp"
    WORKER = "worker"
