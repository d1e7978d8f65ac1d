"""Production: refuses to start without its secrets and real service URLs.

DATABASE_URL is the application's own login role (SELECT/INSERT on the audit table, no UPDATE, DELETE
or TRUNCATE); DATABASE_OWNER_URL, the owner's, is only needed where `migrate` runs. The audit signing key
must exist at KINTSUGI_AUDIT_SIGNING_KEY (never generated here) and be readable by the app only."""
from django.core.exceptions import ImproperlyConfigured

from kintsugi_site import db_roles

from .base import *  # noqa: F403
from .base import DATABASE_OWNER_URL, DATABASE_URL, env

for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "FALKORDB_URL", "CELERY_BROKER_URL", "KINTSUGI_AUDIT_SIGNING_KEY"):
    if not env(name, default=""):
        raise ImproperlyConfigured(f"{name} must be set in production")

DATABASES = db_roles.databases(env=env, owner_url=DATABASE_OWNER_URL, app_url=DATABASE_URL, derive_app_role=False)
if DATABASE_OWNER_URL and DATABASES["default"]["USER"] == DATABASES[db_roles.OWNER_ALIAS]["USER"]:
    raise ImproperlyConfigured("DATABASE_URL must log in as the application role, not as the owner of DATABASE_OWNER_URL")
KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True

DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
