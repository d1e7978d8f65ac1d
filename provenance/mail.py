"""An email backend that files every message in the OutboxEmail table instead of sending it.

Headers `X-Kintsugi-Workspace`, `X-Kintsugi-Run`, `X-Kintsugi-Effect` and `X-Kintsugi-Idempotency`
link a message to what caused it; a message whose idempotency key is already filed is not filed again.
"""
from django.core.mail.backends.base import BaseEmailBackend


class OutboxBackend(BaseEmailBackend):
    def send_messages(self, email_messages) -> int:
        from provenance.models import OutboxEmail, Workspace

        sent = 0
        for message in email_messages:
            headers = message.extra_headers or {}
            workspace = Workspace.objects.filter(name=headers.get("X-Kintsugi-Workspace", "")).first()
            key = headers.get("X-Kintsugi-Idempotency") or None
            _, created = OutboxEmail.objects.get_or_create(
                idempotency_key=key,
                defaults=dict(
                    workspace=workspace,
                    run_number=headers.get("X-Kintsugi-Run") or None,
                    to=", ".join(message.to),
                    subject=message.subject,
                    body=message.body,
                    effect_id=headers.get("X-Kintsugi-Effect") or None,
                ),
            ) if key else (OutboxEmail.objects.create(
                workspace=workspace, to=", ".join(message.to), subject=message.subject, body=message.body
            ), True)
            sent += int(created)
        return sent
