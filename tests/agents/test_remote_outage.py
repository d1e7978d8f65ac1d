"""A remote agent whose replay endpoint is down is an outage with a bounded schedule (shortened here by
settings): the repair blocks, then needs attention with an alert once the schedule is spent, never fails,
and the sweep resumes it to repaired when the endpoint answers again."""
import logging
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from repairs.job import run_repair
from repairs.models import Incident
from repairs.outages import heal_outages
from provenance.recording.replay import ReplayUnavailable
from tests.agents.test_replay_failures import Agent, callback, recorded, replays_writer_as_recorded
from tests.helpers import open_incident, purge_broker

pytestmark = pytest.mark.django_db(transaction=True)


def _replays_properly(request):
    if replays_writer_as_recorded(request):
        return
    callback(request, "get", {"key": "policy"})
    callback(request, "finish", {"decision": {"days": 0}})


def test_a_remote_agent_down_past_its_schedule_needs_attention_then_the_sweep_repairs_it(settings, caplog):
    settings.KINTSUGI_REPLAY_OUTAGE_SECONDS = 1.5
    settings.KINTSUGI_REPLAY_MAX_ATTEMPTS = 100
    settings.KINTSUGI_RETRY_BACKOFF_SECONDS = settings.KINTSUGI_RETRY_BACKOFF_MAX_SECONDS = 1
    agent = Agent(_replays_properly)
    ws = recorded("remote-outage", agent)
    port = agent.server.server_address[1]
    agent.server.shutdown()
    agent.server.server_close()  # the endpoint is down: connections are refused
    incident = open_incident(ws.name, "kb/page")
    purge_broker()
    try:
        with pytest.raises(ReplayUnavailable):
            run_repair(incident_id=incident.pk)
        incident.refresh_from_db()
        assert incident.status == Incident.Status.BLOCKED and "unreachable" in incident.error
        time.sleep(1.6)  # the outage schedule is spent
        with caplog.at_level(logging.ERROR, logger="repairs.job"):
            assert run_repair(incident_id=incident.pk).status == Incident.Status.NEEDS_ATTENTION
        assert any("alert" in r.message and f"incident {incident.pk}" in r.message for r in caplog.records)
        incident.refresh_from_db()
        # Both agents are down: the first replay, the writer's, is the one that finds it.
        assert "needs attention" in incident.error and "agent 'writer' unreachable" in incident.error

        time.sleep(1.1)  # its capped backoff: the sweep tries the agent again, still down
        assert incident.pk in heal_outages().unblocked
        assert run_repair(incident_id=incident.pk).status == Incident.Status.NEEDS_ATTENTION
        assert incident.pk not in heal_outages().unblocked  # not again before its backoff

        # The endpoint answers again on its address: the next sweep resumes the repair to the end.
        agent.server = ThreadingHTTPServer(("127.0.0.1", port), agent.server.RequestHandlerClass)
        threading.Thread(target=agent.server.serve_forever, daemon=True).start()
        time.sleep(1.1)
        assert incident.pk in heal_outages().unblocked
        assert run_repair(incident_id=incident.pk).status == Incident.Status.REPAIRED  # as the worker runs it
    finally:
        purge_broker()
        agent.server.shutdown()
    incident.refresh_from_db()
    statuses = list(incident.transitions.values_list("to_status", flat=True))
    assert "failed" not in statuses and "needs_attention" in statuses
    # Only once it answered: the repair's replays (the writer's digest, then the reader), then the verification's.
    assert [(r["agent"], r["purpose"]) for r in agent.requests] == [
        ("writer", "repair"), ("reader", "repair"), ("writer", "verification"), ("reader", "verification")]
