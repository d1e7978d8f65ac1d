"""A workspace admin's requests that would make a connector a way out, each refused: a login read from
any variable or file and sent to their server, a connector aimed at the deployment's own services or
inward addresses, an option naming code for the worker to import, a mail server's banner read back from
the stored failure, a webhook's token copied into the audit record."""
from __future__ import annotations

import json
import socket
import sys
import threading

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from compensation.drafting import kinds
from compensation.delivery import deliveries
from compensation.delivery.connectors import PermanentFailure, connector
from compensation.delivery_models import Delivery, WorkspaceConnector
from compensation.delivery.execution import execute_item
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from core import egress, embedded, secret_registry
from provenance.models import Workspace
from tests.compensation.delivery_support import Mailbox, free_port
from tests.helpers import create_user

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind
CA_BUNDLE = "-----BEGIN CERTIFICATE-----\nMIIcontractCAbundleNotToLeave\n-----END CERTIFICATE-----\n"


class Collector:
    """An attacker's SMTP server on loopback that offers AUTH and keeps every login and message."""

    def __init__(self):
        self.mailbox, self.logins, self.port = Mailbox(), [], free_port()

        def authenticate(server, session, envelope, mechanism, auth_data):
            self.logins.append(f"{auth_data.login!r} {auth_data.password!r}")
            return AuthResult(success=True)

        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, authenticator=authenticate,
                                     auth_require_tls=False)
        self.controller.start()

    def everything(self) -> str:
        return " ".join(self.logins) + " ".join(m.as_string() for m in self.mailbox.messages)


@pytest.fixture
def collector():
    server = Collector()
    yield server
    server.controller.stop()


@pytest.fixture
def ws_admin(canonical):
    return create_user("trust-admin", "Workspace admin", workspaces=[canonical.incident.workspace])


def _set(canonical, admin, kind, name, options):
    return deliveries.set_connector(workspace=canonical.incident.workspace, kind=kind, name=name, options=options,
                                    actor=admin, reason="attacker", via="cli")


def _email_item(canonical) -> CompensationItem:
    item = canonical.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True).order_by("pk").first()
    item.execution_key = f"trust:{item.pk}"  # as approval sets it (in memory only)
    return item


# --- secrets by reference -------------------------------------------------------------------------------------
def test_smtp_naming_home_and_a_file_as_its_login_sends_nothing_of_them(canonical, ws_admin, collector, tmp_path,
                                                                        monkeypatch, settings):
    bundle = tmp_path / "ca.pem"
    bundle.write_text(CA_BUNDLE)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("SSL_CERT", "")
    attack = {"host": "127.0.0.1", "port": collector.port, "username_env": "HOME", "password_env": "SSL_CERT"}
    with pytest.raises(ValueError, match="no secret named 'HOME' is registered"):
        _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", attack)
    assert not WorkspaceConnector.objects.exists()
    # A row saved before the registry existed reads as no secret: the send fails before connecting.
    with pytest.raises(PermanentFailure, match="not registered"):
        connector("smtp").send(_email_item(canonical), attack)
    assert not collector.logins and not collector.mailbox.messages
    # The same server with a login the operator registered: the login does go (the red case can fail).
    settings.KINTSUGI_SECRETS = "desk_user=env:DESK_SMTP_USER,desk_password=file:" + str(bundle)
    monkeypatch.setenv("DESK_SMTP_USER", "desk")
    _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", {**attack, "username_env": "desk_user",
                                                          "password_env": "desk_password"})
    connector("smtp").send(_email_item(canonical), {**attack, "username_env": "desk_user",
                                                   "password_env": "desk_password"})
    assert len(collector.logins) == 1 and "BEGIN CERTIFICATE" in collector.everything()
    assert str(embedded.kintsugi_home()) not in collector.everything() and "/root" not in collector.everything()


@pytest.mark.parametrize("name", ["DATABASE_URL", "DJANGO_SECRET_KEY", "FALKORDB_URL", "CELERY_BROKER_URL",
                                  "KINTSUGI_CACHE_URL", "GEMINI_API_KEY", "DATABASE_OWNER_URL", "HOME", "SSL_CERT",
                                  "KINTSUGI_AUDIT_SIGNING_KEY", "../etc/passwd", ""])
def test_a_webhook_naming_anything_but_a_registered_secret_is_refused(canonical, ws_admin, name, capsys):
    with pytest.raises(SystemExit) as refused:
        call_command("connectors", "--workspace", canonical.incident.workspace.name, "--set", "refund_reversal=webhook",
                     "--options", json.dumps({"url": "https://hooks.example.com/k", "secret_env": name}),
                     "--user", ws_admin.username, "--reason", "attacker")
    assert refused.value.code == 2 and "secret" in capsys.readouterr().err
    assert not WorkspaceConnector.objects.exists()


@pytest.mark.parametrize("entry", ["db=env:DATABASE_URL", "DJANGO_SECRET_KEY=env:X", "k=env:DJANGO_SECRET_KEY_FILE",
                                   "g=env:GEMINI_API_KEY", "b=env:CELERY_BROKER_URL", "c=env:KINTSUGI_CACHE_URL",
                                   "p=env:PGPASSWORD", "home=file:{home}/secrets/redis-password",
                                   "audit=file:{audit}", "no_source=HOME", "bad name=env:X"])
def test_the_operator_cannot_register_the_deployment_s_own_settings(entry, settings):
    text = entry.format(home=embedded.kintsugi_home(), audit=settings.KINTSUGI_AUDIT_SIGNING_KEY)
    with pytest.raises(ImproperlyConfigured, match="KINTSUGI_SECRETS"):
        secret_registry.parse(text)


def test_a_registered_secret_restricted_to_a_workspace_is_refused_to_another(canonical, ws_admin, settings,
                                                                            monkeypatch):
    other = Workspace.objects.create(name="trust-other")
    settings.KINTSUGI_SECRETS = "acme_hook@trust-other=env:ACME_HOOK_SECRET,shared_hook=env:SHARED_HOOK"
    monkeypatch.setenv("ACME_HOOK_SECRET", "acme-only")
    with pytest.raises(ValueError, match="no secret named 'acme_hook'"):
        _set(canonical, ws_admin, K.REFUND_REVERSAL, "webhook", {"url": "https://hooks.example.com/k",
                                                                 "secret_env": "acme_hook"})
    assert secret_registry.value("acme_hook", workspace=other.name) == "acme-only"
    _set(canonical, ws_admin, K.REFUND_REVERSAL, "webhook", {"url": "https://hooks.example.com/k",
                                                             "secret_env": "shared_hook"})
    assert WorkspaceConnector.objects.get().options["secret_env"] == "shared_hook"


# --- one outbound door ----------------------------------------------------------------------------------------
INWARD = [("refund_reversal=webhook", {"url": "http://127.0.0.1:6479/", "secret_env": "KINTSUGI_WEBHOOK_SECRET"}),
          ("refund_reversal=webhook", {"url": "http://127.0.0.1:8000/api/v1/"}),
          ("refund_reversal=webhook", {"url": "http://169.254.169.254/latest/"}),
          ("refund_reversal=webhook", {"url": "http://10.0.0.5:2375/containers/json"}),
          ("refund_reversal=webhook", {"url": "http://[::1]:6480/"}),
          ("correction_email=smtp", {"host": "169.254.169.254", "port": 80, "from": "desk@example.com"}),
          ("correction_email=smtp", {"host": "127.0.0.1", "port": 6480, "from": "desk@example.com"}),
          ("correction_email=smtp", {"host": "10.0.0.5", "port": 2375}),
          ("correction_email=smtp", {"host": "::1", "port": 6479})]


@pytest.mark.parametrize("choice,options", INWARD)
def test_each_connector_at_each_inward_address_is_refused_when_chosen(canonical, ws_admin, settings, choice, options,
                                                                      capsys):
    settings.FALKORDB_URL, settings.CELERY_BROKER_URL = "redis://:pw@127.0.0.1:6479", "redis://:pw@127.0.0.1:6480/0"
    with pytest.raises(SystemExit) as refused:
        call_command("connectors", "--workspace", canonical.incident.workspace.name, "--set", choice,
                     "--options", json.dumps(options), "--user", ws_admin.username, "--reason", "attacker")
    assert refused.value.code == 2 and "egress policy" in capsys.readouterr().err
    assert not WorkspaceConnector.objects.exists() and not AuditEvent.objects.filter(action="connector.set").exists()


def test_a_name_that_rebinds_inward_after_it_was_chosen_is_refused_when_the_mail_goes(canonical, ws_admin, collector,
                                                                                      monkeypatch):
    answers = {"mail.rebind.test": [egress.ipaddress.ip_address("127.0.0.1")]}
    real = egress._resolve
    monkeypatch.setattr(egress, "_resolve", lambda host, port: answers.get(host) or real(host, port))
    options = {"host": "mail.rebind.test", "port": collector.port}
    _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", options)
    connector("smtp").send(_email_item(canonical), options)  # to the address checked, under the server's name
    assert len(collector.mailbox.messages) == 1
    answers["mail.rebind.test"] = [egress.ipaddress.ip_address("169.254.169.254")]
    with pytest.raises(PermanentFailure, match="refused by egress policy"):
        connector("smtp").send(_email_item(canonical), options)
    assert len(collector.mailbox.messages) == 1


def test_the_postgres_port_is_refused_when_the_database_is_reached_over_a_socket(settings):
    settings.DATABASES = {**settings.DATABASES, "socket": {"HOST": "/run/postgresql", "PORT": "5439"}}
    for url in ("http://127.0.0.1:5439/", "http://[::1]:5439/", "http://localhost:5439/"):
        with pytest.raises(egress.EgressRefused, match="service of this deployment"):
            egress.check_url(url)


# --- no option names code -------------------------------------------------------------------------------------
def test_an_smtp_backend_option_is_refused_and_never_imported(canonical, ws_admin, settings, collector):
    sys.modules.pop("this", None)
    with pytest.raises(ValueError, match="takes no option 'backend'"):
        _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", {"host": "smtp.example.com", "port": 587,
                                                              "backend": "this.s", "from": "desk@example.com"})
    # A row saved before the schema: the option is ignored, the operator's relay used.
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", collector.port
    connector("smtp").send(_email_item(canonical), {"backend": "this.s"})
    assert "this" not in sys.modules and len(collector.mailbox.messages) == 1


@pytest.mark.parametrize("options,problem", [({"port": "587"}, "whole number"), ({"port": True}, "whole number"),
                                             ({"port": 70000}, "port number"), ({"use_tls": "yes"}, "true or false"),
                                             ({"from": "x\r\nBcc: all@example.com"}, "email address"),
                                             ({"host": ["a"]}, "string")])
def test_smtp_options_of_the_wrong_type_are_refused(canonical, ws_admin, options, problem):
    with pytest.raises(ValueError, match=problem):
        _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", options)
    assert not WorkspaceConnector.objects.exists()


# --- remote text never stored ---------------------------------------------------------------------------------
class Banner:
    """A server on loopback that answers every connection with one line and closes."""

    def __init__(self, line: bytes):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, args=(line,), daemon=True).start()

    def _serve(self, line):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.sendall(line)
            conn.close()


@pytest.mark.parametrize("line", [b"-ERR db-primary.internal 10.1.2.3 wrong protocol\r\n",
                                  b"554 5.0.0 db-primary.internal 10.1.2.3 go away\r\n"])
def test_a_servers_banner_never_reaches_the_stored_failure(canonical, ws_admin, line):
    server = Banner(line)
    _set(canonical, ws_admin, K.CORRECTION_EMAIL, "smtp", {"host": "127.0.0.1", "port": server.port})
    money = canonical.incident.compensation_items.filter(kind__in=kinds.MONEY, valid=True)
    for m in money:
        approve_item(item=m, actor=canonical.people.reviewer, reason="checked", via="admin")
        execute_item(item_id=m.pk)
    item = canonical.incident.compensation_items.filter(kind=K.CORRECTION_EMAIL, valid=True).order_by("pk").first()
    approve_item(item=item, actor=canonical.people.reviewer, reason="checked", via="admin")
    execute_item(item_id=item.pk)
    delivery = Delivery.objects.get(item=item)
    stored = delivery.failure_reason + " ".join(delivery.attempt_log.values_list("detail", flat=True))
    assert delivery.state == "failed" and stored
    assert "db-primary" not in stored and "10.1.2.3" not in stored and "ERR" not in stored
    server.sock.close()


# --- URLs redacted --------------------------------------------------------------------------------------------
def test_a_webhook_url_s_token_is_kept_in_the_connector_row_only(canonical, ws_admin, client):
    url = "https://desk.example.com/hook?token=tok_hidden_9"
    _set(canonical, ws_admin, K.CORRECTION_EMAIL, "webhook", {"url": url})
    assert WorkspaceConnector.objects.get().options["url"] == url
    event = AuditEvent.objects.get(action="connector.set")
    assert "tok_hidden_9" not in json.dumps(event.data)
    assert event.data["options"]["url"] == "https://desk.example.com/hook?…"
    client.force_login(canonical.people.lead)
    from django.urls import reverse

    page = client.get(reverse("admin:compensation_auditevent_change", args=[event.pk]))
    assert page.status_code == 200 and "tok_hidden_9" not in page.content.decode(), page.status_code
