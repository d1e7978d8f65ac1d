"""An email backend that files every message in the OutboxEmail table instead of sending it.

Headers `X-Kintsugi-Workspace`, `X-Kintsugi-Run`, `X-Kintsugi-Effect` and `X-Kintsugi-Idempotency`
link a message to what caused it; a message whose idempotency key is already filed is not filed again.
"""
from django.core.mail.backends.base import BaseEmailBackend


class OutboxBackend(BaseEmailBackend):
    def send_messages(self, email_messages) -> int:
        from provenance.models import OutboxEmail, Workspace

        names = {(m.extra_headers or {}).get("X-Kintsugi-Workspace", "") for m in email_messages}
        workspaces = {w.name: w for w in Workspace.objects.filter(name__in=names)}
        rows = []
        for message in email_messages:
            headers = message.extra_headers or {}
            rows.append(OutboxEmail(
                workspace=workspaces.get(headers.get("X-Kintsugi-Workspace", "")),
                run_number=headers.get("X-Kintsugi-Run") or None,
                to=", ".join(message.to), subject=message.subject, body=message.body,
                effect_id=headers.get("X-Kintsugi-Effect") or None,
                idempotency_key=headers.get("X-Kintsugi-Idempotency") or None,
            ))
        keys = [r.idempotency_key for r in rows if r.idempotency_key]
        already = set(OutboxEmail.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True))
        fresh = [r for r in rows if r.idempotency_key not in already]
        OutboxEmail.objects.bulk_create(fresh, ignore_conflicts=True)
        return len(fresh)
