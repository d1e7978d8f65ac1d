"""kintsugi_site.settings.production in a process of its own (settings load once per process): a login
through a TLS-terminating proxy works with the trusted origin and fails without it; the deploy check is
clean; a weak secret stops the start."""
import os
import secrets
import subprocess
import sys
import textwrap

import pytest
from django.db import connection

from tests.helpers import ROOT, database_url

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN_THROUGH_PROXY = textwrap.dedent("""
    import django, sys
    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    # The test settings hash with MD5, which production does not accept: hash the password its way.
    user = get_user_model().objects.get(username="proxied")
    user.set_password("pass-1234-kintsugi")
    user.save()
    c = Client(enforce_csrf_checks=True)
    proxy = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_HOST": sys.argv[1], "HTTP_ORIGIN": "https://kintsugi.example.com",
             "HTTP_REFERER": "https://kintsugi.example.com/admin/login/"}
    page = c.get("/admin/login/", **proxy)
    token = c.cookies["csrftoken"].value
    answer = c.post("/admin/login/?next=/admin/", {"username": "proxied", "password": "pass-1234-kintsugi",
                    "next": "/admin/", "csrfmiddlewaretoken": token}, **proxy)
    print(page.status_code, answer.status_code, answer.get("Location", ""), "sessionid" in answer.cookies)
""")


def _production_env(**overrides) -> dict:
    from django.conf import settings

    from core.audit import keys

    keys.signing_key()  # production never generates it: the session's key must exist (check --deploy)
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "kintsugi_site.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_ALLOWED_HOSTS": "kintsugi.example.com,kintsugi.internal",
        "DJANGO_CSRF_TRUSTED_ORIGINS": "https://kintsugi.example.com",
        "DATABASE_URL": database_url(db, connection.settings_dict["NAME"]),
        "FALKORDB_URL": settings.FALKORDB_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    })
    env.update(overrides)
    return env


@pytest.fixture(scope="module", autouse=True)
def collected_static(tmp_path_factory, django_db_setup):
    """Production serves what `collectstatic` wrote (whitenoise's manifest): run it once, as a release
    would, into a directory of the module's own."""
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("static")
        patch.setenv("KINTSUGI_STATIC_ROOT", str(root))
        done = _run(_production_env(), "manage.py", "collectstatic", "--noinput", "-v", "0")
        assert done.returncode == 0, done.stderr[-2000:]
        yield root


def _run(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def proxied(django_user_model):
    return django_user_model.objects.create_user("proxied", password="pass-1234-kintsugi", is_staff=True)


def test_a_release_compresses_what_browsers_fetch_but_not_source_maps(collected_static):
    scripts = list(collected_static.rglob("redoc.standalone.*.js"))
    assert scripts and all(script.with_name(script.name + ".br").exists() for script in scripts)
    assert list(collected_static.rglob("*.map")) and not list(collected_static.rglob("*.map.gz"))


def test_admin_login_through_a_tls_proxy_succeeds(proxied):
    done = _run(_production_env(), "-c", LOGIN_THROUGH_PROXY, "kintsugi.example.com")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["200", "302", "/admin/", "True"]


def test_login_behind_a_proxy_that_rewrites_host_needs_the_trusted_origin(proxied):
    # The proxy forwards to the upstream's own name; only CSRF_TRUSTED_ORIGINS vouches for the public one.
    trusted = _run(_production_env(), "-c", LOGIN_THROUGH_PROXY, "kintsugi.internal")
    untrusted = _run(_production_env(DJANGO_CSRF_TRUSTED_ORIGINS=""), "-c", LOGIN_THROUGH_PROXY, "kintsugi.internal")
    assert trusted.stdout.split()[:2] == ["200", "302"], trusted.stderr[-2000:]
    assert untrusted.stdout.split()[:2] == ["200", "403"], untrusted.stderr[-2000:]


def test_the_forwarded_proto_header_is_what_makes_the_https_origin_match(proxied):
    # Host preserved, no trusted origins: the Origin matches only when Django knows the request was https.
    with_header = _run(_production_env(DJANGO_CSRF_TRUSTED_ORIGINS=""), "-c", LOGIN_THROUGH_PROXY,
                       "kintsugi.example.com")
    without = _run(_production_env(DJANGO_CSRF_TRUSTED_ORIGINS="", KINTSUGI_BEHIND_TLS_PROXY="false",
                                   DJANGO_SECURE_SSL_REDIRECT="false"), "-c", LOGIN_THROUGH_PROXY, "kintsugi.example.com")
    assert with_header.stdout.split()[:2] == ["200", "302"], with_header.stderr[-2000:]
    assert without.stdout.split()[:2] == ["200", "403"], without.stderr[-2000:]


def test_the_deploy_check_is_clean():
    done = _run(_production_env(), "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("secret", ["short-secret", "a" * 80, "abcd" * 20, "django-insecure-" + "x1y2z3" * 10])
def test_a_weak_secret_key_stops_the_start(secret):
    done = _run(_production_env(DJANGO_SECRET_KEY=secret), "manage.py", "check")
    assert done.returncode != 0 and "DJANGO_SECRET_KEY" in done.stderr


def test_a_deployment_has_an_undo_window_by_default():
    # The tests run with none (execution at once); a deployment gives the decider ten seconds.
    env = _production_env()
    env.pop("KINTSUGI_UNDO_SECONDS", None)
    done = _run(env, "-c", "import django; django.setup(); from django.conf import settings; "
                           "print(settings.KINTSUGI_UNDO_SECONDS)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["10"]
