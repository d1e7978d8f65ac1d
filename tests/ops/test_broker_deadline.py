"""A broker that accepts connections and never answers (frozen) costs an enqueueing request a bounded
time: the repair is not lost, the incident says it could not be enqueued, and the sweep sends it later."""
from __future__ import annotations

import time

import pytest
from django.conf import settings as django_settings

from provenance.recording.services import desk_run
from repairs.job import enqueue_repair
from repairs.models import Incident
from tests.helpers import open_incident
from tests.ops.test_frozen_falkordb import frozen  # noqa: F401  (the fixture, by name)

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen_broker(frozen):  # noqa: F811
    """The Celery producer pointed at a frozen server, with the deadlines the settings configure."""
    from kintsugi_site.celery import app

    names = ("broker_write_url", "broker_connection_timeout", "broker_transport_options", "task_publish_retry_policy")
    saved = {n: app.conf[n] for n in names}

    def reset_pools():
        app._pool = None
        app.amqp._producer_pool = None
    frozen["freeze"]()
    app.conf.update(broker_write_url=frozen["url"] + "/0",
                    broker_connection_timeout=django_settings.CELERY_BROKER_CONNECTION_TIMEOUT,
                    broker_transport_options=django_settings.CELERY_BROKER_TRANSPORT_OPTIONS,
                    task_publish_retry_policy=django_settings.CELERY_TASK_PUBLISH_RETRY_POLICY)
    reset_pools()
    yield frozen
    app.conf.update(saved)
    reset_pools()


def test_enqueueing_against_a_frozen_broker_returns_within_its_deadline(frozen_broker, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace="ops-broker")
    incident = open_incident("ops-broker")
    start = time.monotonic()
    enqueue_repair(incident.pk)
    took = time.monotonic() - start
    assert took < 4 * django_settings.KINTSUGI_BROKER_TIMEOUT_SECONDS + 5, took
    incident.refresh_from_db()
    assert incident.status == Incident.Status.BLOCKED and "could not enqueue" in incident.error
