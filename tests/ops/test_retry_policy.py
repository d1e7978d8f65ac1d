"""The retry policy: attempts are counted per incident across the task's retries and the sweep; the sweep
waits out each blocked incident's backoff; past the bound an outage makes the incident `needs attention`
(never `failed`), which the sweep resumes once the store answers and retry_incident resumes at once."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from provenance.graph.graph import GraphUnavailable, server_key
from provenance.models import Workspace
from provenance.recording.services import desk_run
from repairs.job import run_repair
from repairs.models import Incident
from repairs.outages import backoff_seconds, blocked_by_outage, heal_outages
from repairs.services import retry_incident
from tests.helpers import flagger, open_incident
from tests.ops.test_frozen_falkordb import frozen  # noqa: F401  (the fixture, by name)

pytestmark = pytest.mark.django_db
S = Incident.Status


def test_backoff_grows_to_its_cap(settings):
    settings.KINTSUGI_RETRY_BACKOFF_SECONDS, settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS = 5, 180
    assert [backoff_seconds(n) for n in (0, 1, 2, 3, 6, 40)] == [0, 5, 10, 20, 160, 180]


def test_past_the_bound_an_outage_needs_attention_and_is_resumed_when_the_store_answers(frozen, settings,  # noqa: F811
                                                                                         falkordb_url):
    settings.KINTSUGI_FALKORDB_URLS = [falkordb_url, frozen["url"]]
    settings.KINTSUGI_FALKORDB_TIMEOUT_SECONDS = 1.0
    settings.KINTSUGI_INCIDENT_MAX_ATTEMPTS = 2
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.KINTSUGI_RETRY_BACKOFF_SECONDS, settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS = 60, 600
    Workspace.objects.create(name="ops-attention", falkordb_server=server_key(frozen["url"]))
    desk_run(workspace="ops-attention")
    incident = open_incident("ops-attention")
    frozen["freeze"]()
    with pytest.raises(GraphUnavailable):
        run_repair(incident_id=incident.pk)  # attempt 1: blocked, the task retries
    incident.refresh_from_db()
    assert (incident.status, incident.attempts) == (S.BLOCKED, 1)
    frozen["thaw"]()
    # Blocked a moment ago with a 60 s backoff: the sweep leaves it resting even though the store answers.
    assert incident.pk not in blocked_by_outage()
    Incident.objects.filter(pk=incident.pk).update(updated_at=timezone.now() - timedelta(seconds=61))
    assert incident.pk in blocked_by_outage()
    frozen["freeze"]()
    run_repair(incident_id=incident.pk)  # attempt 2 reaches the bound: no exception, no more task retries
    incident.refresh_from_db()
    assert (incident.status, incident.attempts) == (S.NEEDS_ATTENTION, 2)
    assert incident.error.startswith("needs attention after 2 attempts") and "FalkorDB" in incident.error
    assert incident.pk not in heal_outages().unblocked  # its server still does not answer
    frozen["thaw"]()
    assert incident.pk in blocked_by_outage()  # the store is back: the sweep resumes it, no backoff
    assert run_repair(incident_id=incident.pk).status == S.REPAIRED


def test_retry_incident_resumes_a_needs_attention_incident(settings):
    desk_run(workspace="ops-attention-retry")
    incident = open_incident("ops-attention-retry")
    Incident.objects.filter(pk=incident.pk).update(status=S.NEEDS_ATTENTION, error="needs attention after 30 attempts")
    incident.refresh_from_db()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    retried = retry_incident(incident=incident, actor=flagger(), reason="the store is back", via=Incident.Via.CLI)
    assert retried.status in (S.OPEN, S.BLOCKED)
    assert run_repair(incident_id=incident.pk).status == S.REPAIRED


def test_a_blocked_incident_names_the_store_that_is_away():
    import redis
    from django.db import OperationalError

    from repairs.job import blocked_reason, outage

    lost = OperationalError("connection to server at 127.0.0.1 failed: Connection refused")
    assert blocked_reason(lost).startswith("Postgres unreachable: connection to server")
    frozen_graph = redis.exceptions.TimeoutError("Timeout reading from socket")
    assert blocked_reason(frozen_graph) == "FalkorDB unreachable: TimeoutError: Timeout reading from socket"
    assert outage(frozen_graph)  # an outage to wait out, never a failure
