"""Production: refuses to start without its secrets and real service URLs; expects to sit behind a
reverse proxy that terminates TLS and says so in X-Forwarded-Proto (README: "Production").

DATABASE_URL is the application's own login role (SELECT/INSERT on the audit table, no UPDATE, DELETE
or TRUNCATE); DATABASE_OWNER_URL, the owner's, is only needed where `migrate` runs. The audit signing key
must exist at KINTSUGI_AUDIT_SIGNING_KEY (never generated here: the first audited write without it fails
with a clear error) and be readable by the app only.

KINTSUGI_SECRETS lists the secrets a workspace's connector may name (`name=env:VARIABLE`,
`name=file:/path`, `name@workspace|other=...`; docs/connectors.md), beside the built-in
KINTSUGI_STRIPE_*, KINTSUGI_WEBHOOK_SECRET and KINTSUGI_SMTP_* names. The settings above (the secret key,
the database, FalkorDB and broker URLs, the audit key...) are never among them: base.py refuses to start
when an entry names one."""
from django.core.exceptions import ImproperlyConfigured

from core import db_roles
from core.egress import parse_allow_list

from .base import *  # noqa: F403
from .base import DATABASE_OWNER_URL, DATABASE_URL, env

for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "FALKORDB_URL", "CELERY_BROKER_URL", "DJANGO_ALLOWED_HOSTS"):
    if not env(name, default=""):
        raise ImproperlyConfigured(f"{name} must be set in production")

DATABASES = with_database_deadlines(db_roles.databases(env=env, owner_url=DATABASE_OWNER_URL, app_url=DATABASE_URL,  # noqa: F405
                                                        derive_app_role=False))
if DATABASE_OWNER_URL and DATABASES["default"]["USER"] == DATABASES[db_roles.OWNER_ALIAS]["USER"]:
    raise ImproperlyConfigured("DATABASE_URL must log in as the application role, not as the owner of DATABASE_OWNER_URL")
KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True

MIN_SECRET_LENGTH = 50
MIN_SECRET_DISTINCT = 5


def strong_secret(value: str) -> str:
    """The secret key, or ImproperlyConfigured when it is short, repetitive or a known default: it signs
    sessions, password reset links and CSRF tokens."""
    if value.startswith("django-insecure") or value == "kintsugi-local-development-only":
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is a development default; generate one, e.g. "
                                   "python -c 'import secrets; print(secrets.token_urlsafe(64))'")
    if len(value) < MIN_SECRET_LENGTH or len(set(value)) < MIN_SECRET_DISTINCT:
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters with at "
                                   f"least {MIN_SECRET_DISTINCT} different ones; generate one, e.g. "
                                   "python -c 'import secrets; print(secrets.token_urlsafe(64))'")
    return value


SECRET_KEY = strong_secret(env("DJANGO_SECRET_KEY"))
DEBUG = False

# Behind a TLS-terminating proxy Django sees plain HTTP; the proxy's X-Forwarded-Proto says what the
# browser used. Only safe when the proxy sets (or strips) that header on every request: turn it off with
# KINTSUGI_BEHIND_TLS_PROXY=false when Django itself is reached directly.
if env.bool("KINTSUGI_BEHIND_TLS_PROXY", default=True):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The admin's login form is a cross-origin POST from the proxy's point of view unless its public origin is
# trusted: https://kintsugi.example.com (scheme included), comma-separated.
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
for origin in CSRF_TRUSTED_ORIGINS:
    if not origin.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"DJANGO_CSRF_TRUSTED_ORIGINS entries need a scheme: {origin!r}")

SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True

# Production calls loopback and private addresses only where KINTSUGI_EGRESS_ALLOW says (agents on the
# premises); the local default's loopback is for the demo's own agents.
KINTSUGI_EGRESS_ALLOW = parse_allow_list(env.list("KINTSUGI_EGRESS_ALLOW", default=[]))
