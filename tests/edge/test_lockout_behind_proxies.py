"""The login lockout through the real production server (`make demo`'s gunicorn command with its
uvicorn worker): X-Forwarded-For is believed only from KINTSUGI_TRUSTED_PROXIES, so a guesser who
names a new address on every attempt stays locked out; with the proxy listed, the lockout keys on the
address it names."""
from __future__ import annotations

import http.cookiejar
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from kintsugi_site.client_ip import trusted_proxies
from kintsugi_site.demo import web_server_command
from tests.helpers import ROOT, worker_env
from tests.helpers import free_port as _free_port

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "right-horse-battery"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def serve(tmp_path, **env):
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    proc = subprocess.Popen(web_server_command(sys.executable, bind=f"127.0.0.1:{port}", workers=1), cwd=ROOT,
                            env=worker_env(connection.settings_dict["NAME"], **env), stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)


@pytest.fixture
def server(tmp_path, request):
    proc, base = serve(tmp_path, **getattr(request, "param", {}))
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def login(base: str, username: str, password: str, forwarded: str | None = None) -> int:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect())
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    opener.open(urllib.request.Request(f"{base}/admin/login/", headers=headers), timeout=30).read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    body = urllib.parse.urlencode({"username": username, "password": password, "next": "/admin/",
                                   "csrfmiddlewaretoken": token}).encode()
    try:
        with opener.open(urllib.request.Request(f"{base}/admin/login/?next=/admin/", data=body, headers=headers),
                         timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def staff() -> str:
    name = f"xff-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)
    return name


def test_a_locked_account_stays_locked_whatever_x_forwarded_for_says(server):
    user = staff()
    for _ in range(12):
        assert login(server, user, "wrong") in (200, 429)
    guesses = [login(server, user, f"guess-{i}", forwarded=f"198.51.100.{i}") for i in range(1, 16)]
    assert set(guesses) == {429}, guesses
    assert login(server, user, PASSWORD, forwarded="198.51.100.7") != 302
    assert login(server, user, PASSWORD, forwarded="203.0.113.9, 198.51.100.8") != 302
    assert login(server, staff(), PASSWORD, forwarded="198.51.100.7") == 302  # another account still logs in


@pytest.mark.parametrize("server", [{"KINTSUGI_TRUSTED_PROXIES": "127.0.0.1"}], indirect=True)
def test_behind_a_listed_proxy_the_lockout_keys_on_the_address_it_names(server):
    user = staff()
    for _ in range(12):
        login(server, user, "wrong", forwarded="198.51.100.20")
    assert login(server, user, PASSWORD, forwarded="198.51.100.20") == 429
    # The proxy says this is another client: that client was never locked out (the red case of the
    # test above, which trusts no proxy and so ignores the header).
    assert login(server, user, PASSWORD, forwarded="198.51.100.21") == 302


def test_the_setting_is_checked_and_empty_by_default(settings):
    assert settings.KINTSUGI_TRUSTED_PROXIES == []
    assert trusted_proxies("10.0.0.2, 10.1.0.0/16,") == ["10.0.0.2/32", "10.1.0.0/16"]
    for wrong in ("1", "proxy.internal"):
        with pytest.raises(Exception, match="KINTSUGI_TRUSTED_PROXIES"):
            trusted_proxies(wrong)
