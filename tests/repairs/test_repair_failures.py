import pytest

from provenance.desk.scenario import POISONED_PAGE
from provenance.graph import GraphUnavailable
from provenance.services import desk_run
from repairs.models import Incident
from repairs.services import retry_incident
from repairs.job import run_repair
from tests.repairs.helpers import flagger, open_incident

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
    from provenance.services import get_workspace
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
