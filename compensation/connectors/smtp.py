"""Email through a real mail server: Django's SMTP backend, or a provider's backend (django-anymail)
named in the options.

Each approved email is sent once, with a Message-ID derived from its item, so a copy that does reach
the customer twice is one message to their mail client. A 4xx answer or a server that cannot be reached
is temporary (retried with backoff); a 5xx answer is permanent and the item shows the server's reason.
SMTP has no idempotency key: a send cut off while the server answered is marked `uncertain` for a
person, never repeated blindly (compensation.deliveries)."""
from __future__ import annotations

import hashlib
import smtplib
import socket

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from compensation.connectors.base import Connector, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.connectors.config import secret
from compensation.models import CompensationItem

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def message_id(item) -> str:
    domain = (settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "kintsugi.invalid").strip(">")
    digest = hashlib.sha256(item.execution_key.encode()).hexdigest()[:20]
    return f"<kintsugi.{item.pk}.{digest}@{domain}>"


def _connection(options: dict):
    backend = options.get("backend") or SMTP_BACKEND
    if backend != SMTP_BACKEND:
        return get_connection(backend, fail_silently=False)
    return get_connection(
        SMTP_BACKEND, fail_silently=False,
        host=options.get("host") or settings.EMAIL_HOST, port=int(options.get("port") or settings.EMAIL_PORT),
        username=secret(options.get("username_env", "KINTSUGI_SMTP_USERNAME")) or None,
        password=secret(options.get("password_env", "KINTSUGI_SMTP_PASSWORD")) or None,
        use_tls=bool(options.get("use_tls", settings.EMAIL_USE_TLS)),
        timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS)


def _refusal(code: int, text: bytes | str) -> Exception:
    reason = (text.decode(errors="replace") if isinstance(text, bytes) else str(text))[:200]
    if 400 <= code < 500:
        return TemporaryFailure(f"mail server answered {code}", status_code=code)
    return PermanentFailure(f"mail server refused: {code} {reason}", status_code=code)


class Smtp(Connector):
    name, label = "smtp", "email (SMTP or a provider's backend)"
    kinds = frozenset(CompensationItem.EMAIL_KINDS)
    resumes_safely = False
    secret_options = {"username_env": "KINTSUGI_SMTP_USERNAME", "password_env": "KINTSUGI_SMTP_PASSWORD"}

    def configured(self, options: dict) -> bool:
        return bool(options.get("backend") or options.get("host") or settings.EMAIL_HOST)

    def send(self, item, options: dict) -> Outcome:
        mid = message_id(item)
        incident = item.incident
        message = EmailMessage(
            subject=item.subject, body=item.body, from_email=options.get("from") or settings.DEFAULT_FROM_EMAIL,
            to=[item.customer_email], connection=_connection(options),
            headers={"Message-ID": mid, "X-Kintsugi-Workspace": incident.workspace.name,
                     "X-Kintsugi-Compensation": str(item.pk), "X-Kintsugi-Idempotency": item.execution_key})
        try:
            message.send()
        except smtplib.SMTPRecipientsRefused as e:
            code, text = next(iter(e.recipients.values()))
            raise _refusal(code, text) from None
        except smtplib.SMTPResponseException as e:
            raise _refusal(e.smtp_code, e.smtp_error) from None
        except (smtplib.SMTPServerDisconnected, smtplib.SMTPConnectError, ConnectionError, socket.timeout, OSError):
            raise TemporaryFailure("mail server unreachable") from None
        return Outcome("accepted", reference=mid, status_code=250)


register(Smtp())
