"""Email through a real mail server (Django's SMTP backend), or through the email provider's backend the
operator set (KINTSUGI_EMAIL_BACKEND, e.g. django-anymail's): never a backend a workspace names, since
naming a backend names code for the worker to import.

The server is the workspace's `host`/`port`, else the operator's relay (KINTSUGI_SMTP_HOST / _PORT). Both
pass core.egress: a workspace's server when it is chosen and again on each send (resolved once, smtplib
connects to the address checked and keeps the server's name for STARTTLS), the operator's relay as the
one service of the deployment this connector exists to reach. The login comes from the secret registry.

Each approved email is sent once, with a Message-ID derived from its item, so a copy that does reach
the customer twice is one message to their mail client. A 4xx answer or a server that cannot be reached
is temporary (retried with backoff); a 5xx answer is permanent. Only the reply's numeric code is kept,
never its text: a banner or a reply is the remote side's words (an internal host name, an address).
SMTP has no idempotency key: a send cut off while the server answered is marked `uncertain` for a
person, never repeated blindly (compensation.delivery.deliveries)."""
from __future__ import annotations

import functools
import hashlib
import smtplib
import socket

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend

from compensation.drafting.kinds import MESSAGES
from compensation.delivery.connectors.base import Connector, Option, Outcome, PermanentFailure, TemporaryFailure, register
from compensation.delivery.messages import message as outgoing
from core import egress, secret_registry


def message_id(item) -> str:
    domain = (settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "kintsugi.invalid").strip(">")
    digest = hashlib.sha256(item.execution_key.encode()).hexdigest()[:20]
    return f"<kintsugi.{item.pk}.{digest}@{domain}>"


def relay() -> frozenset[tuple[str, int]]:
    """The operator's own mail relay, when set."""
    return frozenset({(settings.EMAIL_HOST, int(settings.EMAIL_PORT))}) if settings.EMAIL_HOST else frozenset()


class CheckedSMTP(smtplib.SMTP):
    """smtplib's client whose socket goes to the address core.egress checked when connecting; `_host`
    (the name used for STARTTLS's server name) stays the server's name."""

    def __init__(self, *args, exempt: frozenset[tuple[str, int]] = frozenset(), **kwargs):
        self.exempt = exempt  # before smtplib's __init__, which connects
        super().__init__(*args, **kwargs)

    def _get_socket(self, host, port, timeout):
        address = egress.checked_address(host, int(port), exempt=self.exempt)
        return socket.create_connection((str(address), port), timeout, self.source_address)


class CheckedBackend(EmailBackend):
    """Django's SMTP backend connecting only through CheckedSMTP (no implicit-TLS variant: `use_ssl` is
    not an option here)."""

    def __init__(self, *, exempt: frozenset[tuple[str, int]], **kwargs):
        super().__init__(**kwargs)
        self.exempt = exempt

    @property
    def connection_class(self):
        return functools.partial(CheckedSMTP, exempt=self.exempt)


def _server(options: dict) -> tuple[str, int]:
    return options.get("host") or settings.EMAIL_HOST, int(options.get("port") or settings.EMAIL_PORT)


def _refusal(code: int) -> Exception:
    if 400 <= code < 500:
        return TemporaryFailure(f"mail server answered {code}", status_code=code)
    if 500 <= code < 600:
        return PermanentFailure(f"mail server refused: {code}", status_code=code)
    return PermanentFailure("the server did not answer as a mail server")


class Smtp(Connector):
    name, label = "smtp", "email (SMTP or the operator's email provider)"
    kinds = MESSAGES
    resumes_safely = False
    secret_options = {"username_env": "KINTSUGI_SMTP_USERNAME", "password_env": "KINTSUGI_SMTP_PASSWORD"}
    schema = {"host": Option(str, role="host"), "port": Option(int, role="port"), "use_tls": Option(bool),
              "from": Option(str, role="email"), "username_env": Option(str, role="secret"),
              "password_env": Option(str, role="secret")}

    def destinations(self, options: dict) -> list[str]:
        if settings.KINTSUGI_EMAIL_BACKEND:
            return []
        host, port = _server(options)
        return [f"smtp://{f'[{host}]' if ':' in host else host}:{port}"] if host else []

    def exempt(self, options: dict) -> frozenset[tuple[str, int]]:
        return relay()

    def configured(self, options: dict, *, workspace: str) -> bool:
        return bool(settings.KINTSUGI_EMAIL_BACKEND or options.get("host") or settings.EMAIL_HOST)

    def operator_connection(self, *, workspace: str):
        """The deployment's own way out for mail (its email backend, else its relay): what kintsugi uses
        for its own messages to people of a workspace, never a workspace's server."""
        return self._connection({}, workspace=workspace)

    def _connection(self, options: dict, *, workspace: str):
        if settings.KINTSUGI_EMAIL_BACKEND:
            return get_connection(settings.KINTSUGI_EMAIL_BACKEND, fail_silently=False)
        try:
            username = self.secret(options, "username_env", workspace=workspace)
            password = self.secret(options, "password_env", workspace=workspace)
        except secret_registry.SecretRefused:
            raise PermanentFailure("the connector names a secret that is not registered for its workspace") from None
        host, port = _server(options)
        return CheckedBackend(exempt=relay(), host=host, port=port, username=username or None,
                              password=password or None, fail_silently=False,
                              use_tls=bool(options.get("use_tls", settings.EMAIL_USE_TLS)),
                              timeout=settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS)

    def send(self, item, options: dict) -> Outcome:
        mid = message_id(item)
        incident = item.incident
        shown = outgoing(item)  # the very message the reviewer read (compensation.delivery.messages)
        message = EmailMessage(
            subject=shown.subject, body=shown.body, from_email=options.get("from") or settings.DEFAULT_FROM_EMAIL,
            to=[shown.to], connection=self._connection(options, workspace=incident.workspace.name),
            headers={"Message-ID": mid, "X-Kintsugi-Workspace": incident.workspace.name,
                     "X-Kintsugi-Compensation": str(item.pk), "X-Kintsugi-Idempotency": item.execution_key})
        try:
            message.send()
        except egress.Unresolved:
            raise TemporaryFailure("mail server unreachable") from None
        except egress.EgressRefused:
            raise PermanentFailure(egress.Outcome.REFUSED) from None
        except smtplib.SMTPRecipientsRefused as e:
            code, _ = next(iter(e.recipients.values()))
            raise _refusal(int(code)) from None
        except smtplib.SMTPResponseException as e:
            raise _refusal(int(e.smtp_code)) from None
        except (smtplib.SMTPException, ConnectionError, socket.timeout, OSError):
            raise TemporaryFailure("mail server unreachable") from None
        return Outcome("accepted", reference=mid, status_code=250)


register(Smtp())
