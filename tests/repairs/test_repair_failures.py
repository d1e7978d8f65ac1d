import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import GraphUnavailable
from provenance.recording.services import desk_run
from repairs.models import Incident
from repairs.services import retry_incident
from repairs.job import run_repair
from tests.helpers import flagger, open_incident

pytestmark = pytest.mark.django_db(transaction=True)


def test_falkordb_down_mid_repair_blocks_the_incident_and_a_retry_completes_it(own_falkordb):
    stop, start, port = own_falkordb
    desk_run(workspace="flaky")
    incident = open_incident("flaky", POISONED_PAGE)
    stop()
    with pytest.raises(GraphUnavailable, match=f"127.0.0.1:{port}"):
        run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    assert incident.status == Incident.Status.BLOCKED
    assert f"127.0.0.1:{port}" in incident.error
    assert incident.verification is None and not incident.effects.exists()
    start()
    retry_incident(incident=incident, actor=flagger(), reason="graph is back", via=Incident.Via.CLI)
    incident = run_repair(incident_id=incident.pk)
    assert incident.status == Incident.Status.REPAIRED
    assert incident.counts["superseded"] == 8 and incident.effects_invalidated == 10
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert list(incident.transitions.values_list("to_status", flat=True)) == [
        "open", "repairing", "blocked", "open", "repairing", "repaired"]


def test_only_failed_or_blocked_incidents_are_retried():
    desk_run(workspace="noretry")
    incident = open_incident("noretry", POISONED_PAGE)
    with pytest.raises(ValueError, match="only failed or blocked"):
        retry_incident(incident=incident, actor=flagger(), reason="why not", via=Incident.Via.CLI)


def test_flag_requires_a_reason_and_the_role_outside_the_cli():
    from provenance.recording.services import get_workspace
    from repairs.services import flag_source

    desk_run(workspace="roles")
    user = flagger("plain")
    with pytest.raises(ValueError, match="reason"):
        flag_source(workspace=get_workspace("roles"), source_id=POISONED_PAGE, actor=user, reason=" ", via="cli")
    with pytest.raises(LookupError, match="no workspace"):  # not a member: the workspace does not exist for them
        flag_source(workspace=get_workspace("roles"), source_id=POISONED_PAGE, actor=user, reason="bad", via="api")
    get_workspace("roles").members.add(user)
    with pytest.raises(PermissionError, match="may not flag"):
        flag_source(workspace=get_workspace("roles"), source_id=POISONED_PAGE, actor=user, reason="bad", via="api")
    assert not Incident.objects.exists()


def test_the_sweep_leaves_blocked_repairs_alone_until_falkordb_answers(own_falkordb, settings):
    from repairs.outages import heal_outages

    settings.KINTSUGI_RETRY_BACKOFF_SECONDS = 0  # at once here; the sweep's backoff has tests of its own (tests/ops)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    stop, start, port = own_falkordb
    desk_run(workspace="sweep")
    incident = open_incident("sweep", POISONED_PAGE)
    stop()
    with pytest.raises(GraphUnavailable):
        run_repair(incident_id=incident.pk)
    healed = heal_outages()
    assert f"127.0.0.1:{port}" in healed.graph_error and healed.unblocked == [] and healed.executed == 0
    assert Incident.objects.get(pk=incident.pk).status == Incident.Status.BLOCKED
    start()
    healed = heal_outages()
    assert healed.graph_error is None and healed.unblocked == [incident.pk]


def test_the_sweep_heals_the_workspaces_whose_server_answers_and_leaves_the_others_blocked(own_falkordb, settings,
                                                                                        falkordb_url):
    """Workspaces on two FalkorDB servers, one of them down: the sweep resumes the repairs of the one
    that answers, names the one that does not, and touches nothing of its workspaces until it is back."""
    from provenance.graph.graph import server_key
    from provenance.models import Workspace
    from repairs.outages import heal_outages

    settings.KINTSUGI_RETRY_BACKOFF_SECONDS = 0  # at once here; the sweep's backoff has tests of its own (tests/ops)
    settings.CELERY_TASK_ALWAYS_EAGER = False  # enqueued, not run: the test reads what the sweep decided
    stop, start, port = own_falkordb
    east_key, west_key = server_key(settings.FALKORDB_URL), server_key(falkordb_url)
    settings.KINTSUGI_FALKORDB_URLS = [settings.FALKORDB_URL, falkordb_url]
    Workspace.objects.create(name="east", falkordb_server=east_key)
    Workspace.objects.create(name="west", falkordb_server=west_key)
    desk_run(workspace="east")
    desk_run(workspace="west")
    east, west = open_incident("east", POISONED_PAGE), open_incident("west", POISONED_PAGE)
    stop()
    with pytest.raises(GraphUnavailable):
        run_repair(incident_id=east.pk)
    # The broker refused west's task: blocked with nothing wrong with its server.
    Incident.objects.filter(pk=west.pk).update(status=Incident.Status.BLOCKED, error="could not enqueue the repair")

    healed = heal_outages()
    assert f"127.0.0.1:{port}" in healed.graph_error
    assert healed.unblocked == [west.pk]
    assert Incident.objects.get(pk=east.pk).status == Incident.Status.BLOCKED

    start()
    healed = heal_outages()
    assert healed.graph_error is None and east.pk in healed.unblocked


def test_a_limit_the_data_exceeds_fails_the_repair_instead_of_blocking_it_for_ever(monkeypatch):
    """Postgres refusing a statement for a limit (class 54: a jsonb value over 256 MB, an array too
    long) is not an outage: retrying cannot mend it, so the repair fails with the reason at once."""
    from django.db import connection

    from repairs import job

    desk_run(workspace="limits")
    incident = open_incident("limits", POISONED_PAGE)

    def too_big(incident, plan):
        with connection.cursor() as cur:
            cur.execute("SELECT array_fill(0, ARRAY[200000000])")  # SQLSTATE 54000, program_limit_exceeded

    monkeypatch.setattr(job, "checkpoint_plan", too_big)
    failed = run_repair(incident_id=incident.pk)
    assert failed.status == Incident.Status.FAILED and "exceeds the maximum" in failed.error
    assert failed.transitions.filter(to_status=Incident.Status.BLOCKED).count() == 0


def test_a_lost_database_connection_still_blocks_the_repair_for_a_retry():
    from django.db import OperationalError

    from provenance.graph.graph import GraphUnavailable as Unavailable
    from repairs.job import outage

    lost = OperationalError("connection refused")
    lost.__cause__ = Exception("no SQLSTATE: the server never answered")
    assert outage(lost) and outage(Unavailable("FalkorDB at redis://127.0.0.1:1 is unreachable"))
