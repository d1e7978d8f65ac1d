"""Fixtures for delivery: a real SMTP server (aiosmtpd) and a fake Stripe on loopback, wired to a
repaired canonical incident whose workspace chose them as its connectors."""
from __future__ import annotations

import socket
import threading
import time
from email import message_from_bytes
from types import SimpleNamespace

import pytest
from aiosmtpd.controller import Controller

from compensation.delivery_models import WorkspaceConnector
from compensation.models import CompensationItem
from tests.fake_stripe import FakeStripe

K = CompensationItem.Kind
STRIPE_KEY = "sk_test_not_real"
WEBHOOK_SECRET = "whsec_test_not_real"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mailbox:
    """aiosmtpd's handler: keeps each message; `answers` scripts refusals ("451 ...", "550 ...")."""

    def __init__(self):
        self.messages = []
        self.answers: list[str] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            if self.answers:
                return self.answers.pop(0)
            self.messages.append(message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"


class SmtpServer:
    def __init__(self):
        self.mailbox = Mailbox()
        self.port = free_port()
        self.controller = None

    def start(self):
        # Named, so no connection waits for a reverse lookup of this machine's name (aiosmtpd's default).
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, server_hostname="mail.test")
        self.controller.start()
        return self

    def stop(self):
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def smtp_server(settings):
    server = SmtpServer().start()
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    yield server
    server.stop()


@pytest.fixture
def fake_stripe(settings, monkeypatch):
    monkeypatch.setenv("KINTSUGI_STRIPE_API_KEY", STRIPE_KEY)
    monkeypatch.setenv("KINTSUGI_STRIPE_WEBHOOK_SECRET", WEBHOOK_SECRET)
    # The deadline is every delivery's, SMTP's to the in-process mail server too: short enough that a hang
    # test is quick, long enough that a loaded machine (the whole suite on two cores) still gets its answers.
    with FakeStripe(hang_seconds=4.0) as fake:
        settings.KINTSUGI_STRIPE_API_BASE = fake.url
        settings.KINTSUGI_DELIVERY_TIMEOUT_SECONDS = 2.0
        yield fake


def use_connectors(workspace_id: int, **by_kind) -> None:
    for kind, (name, options) in by_kind.items():
        WorkspaceConnector.objects.update_or_create(workspace_id=workspace_id, kind=kind,
                                                    defaults={"connector": name, "options": options})


def real_connectors(workspace_id: int) -> None:
    use_connectors(workspace_id, **{K.REFUND_REVERSAL: ("stripe", {}), K.REPLACEMENT_REFUND: ("stripe", {}),
                                    K.CORRECTION_EMAIL: ("smtp", {}), K.REPLACEMENT_EMAIL: ("smtp", {})})


def wait_until(predicate, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def desk(canonical, smtp_server, fake_stripe, settings):
    settings.KINTSUGI_RETRY_BACKOFF_SECONDS = 0
    real_connectors(canonical.incident.workspace_id)
    return SimpleNamespace(incident=canonical.incident, people=canonical.people, smtp=smtp_server,
                           stripe=fake_stripe)
