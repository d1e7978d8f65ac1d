"""Production: refuses to start without its secrets and real service URLs."""
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import env

for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "FALKORDB_URL", "CELERY_BROKER_URL"):
    if not env(name, default=""):
        raise ImproperlyConfigured(f"{name} must be set in production")

DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
