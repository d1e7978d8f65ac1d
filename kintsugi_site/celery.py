import os

from celery import Celery
from celery.signals import worker_process_shutdown

from core.broker import closed_channel_is_a_lost_connection

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")

app = Celery("kintsugi")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
closed_channel_is_a_lost_connection()  # a broker killed while a task is acknowledged: reconnect, not die


@worker_process_shutdown.connect
def _sign_pending_audit_heads(**kwargs) -> None:
    # Pool children may exit without running atexit: sign the audit chains' heads they still owe.
    from core.audit import checkpoints

    checkpoints.flush()
