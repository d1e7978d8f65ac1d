import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")

app = Celery("kintsugi")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
