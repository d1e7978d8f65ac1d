"""The contract every registered connector keeps, whichever it is (a new one is covered by being
registered): it declares its options' schema, and aimed at an inward address (a service of this
deployment on loopback, loopback itself where the allow-list does not cover it, link-local, private) it is
refused when chosen and refused again when it sends, before any connection is made."""
from __future__ import annotations

import socket
import threading

import pytest

from compensation.delivery import deliveries
from compensation.delivery.connectors import CONNECTORS, PermanentFailure, connector
from compensation.delivery.connectors.base import Connector, Option
from compensation.delivery_models import WorkspaceConnector
from compensation.models import AuditEvent
from core import egress
from tests.helpers import create_user

pytestmark = pytest.mark.django_db
NAMES = sorted(CONNECTORS)


class OwnService:
    """A listener on loopback that the settings name as one of the deployment's FalkorDB servers: it
    counts every connection it is offered."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port, self.accepted, self.running = self.sock.getsockname()[1], 0, True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self.running = False
        self.sock.close()


@pytest.fixture
def own_service(settings):
    service = OwnService()
    settings.KINTSUGI_FALKORDB_URLS = [f"redis://127.0.0.1:{service.port}"]
    yield service
    service.close()


def targets(own_port: int) -> list[tuple[str, str, int, list[str] | None]]:
    """(what, host, port, allow-list to use; None: the local default, loopback allowed)."""
    return [("a service of this deployment on loopback", "127.0.0.1", own_port, None),
            ("the same service as ::1", "::1", own_port, None),
            ("the web port", "127.0.0.1", 8000, None),
            ("loopback, not allowed", "127.0.0.1", 9, []),
            ("[::1], not allowed", "::1", 6480, []),
            ("cloud metadata (link-local)", "169.254.169.254", 80, None),
            ("a private Docker daemon", "10.0.0.5", 2375, None)]


def aim(found: Connector, host: str, port: int, settings) -> dict | None:
    """Options (and the API base setting) pointing `found` at host:port; None when nothing it takes
    says where it connects (it then must connect nowhere)."""
    shown = f"[{host}]" if ":" in host else host
    options = {}
    for key, option in found.schema.items():
        if option.role == "url":
            options[key] = f"http://{shown}:{port}/hook"
        elif option.role == "host":
            options[key] = host
        elif option.role == "port":
            options[key] = port
    if found.base_setting:
        setattr(settings, found.base_setting, f"http://{shown}:{port}")
    return options if (options or found.base_setting) else None


class Dialled:
    """Every socket connection attempted while it is installed; one to a target is refused on the spot."""

    def __init__(self, monkeypatch, forbidden: set[tuple[str, int]]):
        self.calls: list[tuple[str, int]] = []
        real = socket.socket.connect

        def connect(sock, address):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                self.calls.append((str(address[0]), int(address[1])))
                if (str(address[0]), int(address[1])) in forbidden:
                    raise ConnectionRefusedError("the contract test stops a connection egress should have refused")
            return real(sock, address)

        monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.mark.parametrize("name", NAMES)
def test_every_connector_declares_its_options_schema(name):
    found = CONNECTORS[name]
    declared = [k for k in type(found).__mro__ if k is not Connector and "schema" in vars(k)]
    assert declared, f"connector {name!r} declares no options schema"
    assert isinstance(found.schema, dict) and all(isinstance(o, Option) for o in found.schema.values())
    assert set(found.secret_options) <= {k for k, o in found.schema.items() if o.role == "secret"}
    for key in found.schema:  # a secret's value is never an option: only its registered name
        assert not key.lower().endswith(("secret", "key", "password")), key


@pytest.mark.parametrize("name", NAMES)
def test_every_connector_aimed_inward_is_refused_when_chosen_and_when_sending(name, canonical, own_service, settings,
                                                                             monkeypatch):
    found = CONNECTORS[name]
    workspace = canonical.incident.workspace
    admin = create_user(f"contract-{name}", "Workspace admin", workspaces=[workspace])
    kind = sorted(found.kinds)[0]
    item = canonical.incident.compensation_items.filter(kind__in=found.kinds).order_by("pk").first()
    if item is not None:
        item.execution_key = f"contract:{name}:{item.pk}"  # as approval sets it (in memory only)
    for default in found.secret_options.values():
        monkeypatch.setenv(default, "not-a-real-secret")
    for what, host, port, allow in targets(own_service.port):
        if allow is not None:
            settings.KINTSUGI_EGRESS_ALLOW = allow
        options = aim(found, host, port, settings)
        if options is None:  # it takes nothing that says where: it must say it connects nowhere
            assert found.destinations({}) == [], f"{name} connects somewhere no option names"
            continue
        with pytest.raises(ValueError, match="egress policy"):
            deliveries.set_connector(workspace=workspace, kind=kind, name=name, options=options, actor=admin,
                                     reason="contract", via="cli")
        assert not WorkspaceConnector.objects.filter(workspace=workspace, kind=kind, connector=name).exists(), what
        if item is not None:
            dialled = Dialled(monkeypatch, {(host, port)})
            with pytest.raises(PermanentFailure) as refused:
                found.send(item, options)
            assert refused.value.detail == egress.Outcome.REFUSED, (what, refused.value.detail)
            assert (host, port) not in dialled.calls, f"{name} dialled {what}"
            monkeypatch.undo()
            for default in found.secret_options.values():
                monkeypatch.setenv(default, "not-a-real-secret")
        settings.KINTSUGI_EGRESS_ALLOW = ["127.0.0.0/8", "::1/128"]
    assert own_service.accepted == 0
    assert not AuditEvent.objects.filter(action="connector.set", actor_name=admin.username).exists()


def test_the_contract_reaches_every_outbound_connector(canonical):
    """The loop above covers each connector that connects anywhere: today the webhook, SMTP and Stripe."""
    outbound = {n for n, c in CONNECTORS.items() if any(o.role in ("url", "host") for o in c.schema.values())
                or c.base_setting}
    assert {"webhook", "smtp", "stripe"} <= outbound
    assert all(canonical.incident.compensation_items.filter(kind__in=CONNECTORS[n].kinds).exists() for n in outbound)
