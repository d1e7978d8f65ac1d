"""The repair's promises beyond the canonical numbers: correctness on generated desks, minimal
re-execution, serialisation, and resumption after a worker is killed."""
import threading
from collections import Counter

import pytest
from django.db import connection

from compensation.models import AuditEvent
from provenance.desk.scenario import PAGES, POISONED_PAGE
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run
from repairs.models import Incident, RepairEffect
from repairs.services import IncidentAlreadyOpen
from repairs.job import run_repair
from tests.helpers import (Worker, flagger, graph_dump, inputs_by_step, open_incident, purge_broker, repair,
                           verification_outcome, wait_for, wait_until_finished, worker_env)

pytestmark = pytest.mark.django_db(transaction=True)

PAGE_IDS = [p[0] for p in PAGES]


def at_once(fn, n: int = 2) -> list:
    """Run `fn` in n threads released together; each thread uses its own database connection."""
    results, barrier = [], threading.Barrier(n)

    def run():
        barrier.wait()
        try:
            results.append(fn())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("page", PAGE_IDS)
def test_generated_desk_repair_equals_a_clean_run(seed, page):
    desk_run(workspace="gen", tickets=300, seed=seed)
    desk_run(workspace="gen-clean", tickets=300, seed=seed, exclude_source=page)
    incident = repair("gen", page)
    assert incident.status == "repaired", incident.error
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert export_state(workspace="gen") == export_state(workspace="gen-clean")


@pytest.mark.parametrize("tickets,seed", [(None, 0), (300, 5)])
def test_reexecutions_equal_the_minimum(tickets, seed):
    """Computed independently: the surviving actions whose inputs (payload, values read) differ
    between the poisoned run and a clean run are exactly the ones the repair re-ran."""
    desk_run(workspace="min", tickets=tickets, seed=seed)
    desk_run(workspace="min-clean", tickets=tickets, seed=seed, exclude_source=POISONED_PAGE)
    before = inputs_by_step("min")
    clean = inputs_by_step("min-clean")
    minimum = {aid for step, (aid, *inputs) in before.items() if step in clean and clean[step][1:] != tuple(inputs)}
    incident = repair("min", POISONED_PAGE)
    rerun = set(incident.outcomes.filter(status__in=["rerun_same", "rerun_changed"]).values_list("action_id", flat=True))
    assert rerun == minimum
    assert len(rerun) > 0


def test_two_concurrent_flags_open_exactly_one_incident():
    desk_run(workspace="race")
    user = flagger()

    def flag():
        try:
            return open_incident("race", POISONED_PAGE, user).pk
        except IncidentAlreadyOpen as exc:
            return exc

    results = at_once(flag)
    assert Incident.objects.filter(workspace__name="race").count() == 1
    refused = [r for r in results if isinstance(r, IncidentAlreadyOpen)]
    assert len(refused) == 1 and f"#{Incident.objects.get().pk}" in str(refused[0])


def test_a_repair_delivered_twice_at_once_runs_once():
    desk_run(workspace="twice")
    incident = open_incident("twice", POISONED_PAGE)
    at_once(lambda: run_repair(incident_id=incident.pk))
    incident.refresh_from_db()
    assert incident.status == "repaired"
    assert incident.counts["new"] == 4
    assert RepairEffect.objects.filter(incident=incident, role="invalidated").count() == 10
    assert incident.transitions.filter(to_status="repairing").count() == 1


def test_overlapping_incidents_compensate_each_effect_once():
    desk_run(workspace="overlap")
    desk_run(workspace="overlap-clean", exclude_source=[POISONED_PAGE, "acme/refund-policy"])
    first = repair("overlap", POISONED_PAGE)
    second = repair("overlap", "acme/refund-policy")
    assert (first.status, second.status) == ("repaired", "repaired")
    invalidated = RepairEffect.objects.filter(incident__workspace__name="overlap", role="invalidated")
    counts = Counter(invalidated.values_list("effect_id", flat=True))
    assert counts and max(counts.values()) == 1
    # The first repair's held replacements never left: the second cancels them instead of compensating.
    assert RepairEffect.objects.filter(incident=second, role="cancelled").exists()
    assert [second.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert export_state(workspace="overlap") == export_state(workspace="overlap-clean")


@pytest.mark.worker
@pytest.mark.parametrize("fault,scope", [("walked", "radius"), ("applied:1", "radius"), ("applied:6", "radius"),
                                         ("verifying", "radius"), ("baselined", "full"), ("drafted:1", "radius"),
                                         ("verified", "radius")])
def test_worker_killed_mid_repair_resumes_to_the_same_outcome(fault, scope, tmp_path, settings):
    # `baselined` (the whole-desk baseline recorded, not yet diffed) is a checkpoint of the full
    # verification only: the incremental one records no baseline.
    settings.KINTSUGI_VERIFY_SCOPE = scope
    desk_run(workspace="ref")
    reference = repair("ref", POISONED_PAGE)
    assert reference.verification["scope"] == scope
    desk_run(workspace="kill")
    fault_file = tmp_path / "fault"
    fault_file.write_text(fault)
    purge_broker()
    worker = Worker(worker_env(connection.settings_dict["NAME"], KINTSUGI_FAULT_FILE=str(fault_file),
                               KINTSUGI_VERIFY_SCOPE=scope), tmp_path / "worker.log").start()
    try:
        incident = open_incident("kill", POISONED_PAGE)
        wait_until_finished(incident, timeout=120)
    finally:
        worker.stop()
    incident.refresh_from_db()
    assert not fault_file.exists(), "the fault point was never reached"
    assert incident.status == "repaired", incident.error
    assert incident.counts == reference.counts
    assert verification_outcome(incident.verification) == verification_outcome(reference.verification)

    def effects(inc):
        return sorted(inc.effects.values_list("role", "kind", "ticket", "amount_cents", "effect_id"))

    assert effects(incident) == effects(reference)
    assert graph_dump("kill") == graph_dump("ref")

    def items(inc):
        return sorted(inc.compensation_items.values_list("kind", "ticket_id", "amount_cents", "status"))

    def drafted_events(inc):
        return AuditEvent.objects.filter(incident_id=inc.pk, action="item.drafted").count()

    assert items(incident) == items(reference) and drafted_events(incident) == drafted_events(reference) == 10


@pytest.mark.worker
def test_a_whole_worker_killed_mid_repair_is_resumed_by_the_next_worker(tmp_path):
    from provenance.recording.services import WorkspaceBusy
    from repairs.services import orphaned_incidents

    desk_run(workspace="ref")
    reference = repair("ref", POISONED_PAGE)
    desk_run(workspace="gone")
    fault_file = tmp_path / "fault"
    fault_file.write_text("stall:applied:2")
    purge_broker()
    env = worker_env(connection.settings_dict["NAME"], KINTSUGI_FAULT_FILE=str(fault_file))
    first = Worker(env, tmp_path / "first.log").start()
    try:
        incident = open_incident("gone", POISONED_PAGE)
        wait_for(lambda: not fault_file.exists(), timeout=120)  # the repair is stalled mid-apply
        # A running repair is never replaced under its feet: the desk run waits for the graph the repair
        # holds, then gives up with nothing replaced.
        with pytest.raises(WorkspaceBusy, match="workspace 'gone' is busy"):
            desk_run(workspace="gone")
    finally:
        first.kill()  # SIGKILL to the whole worker: parent and child, no chance to requeue
    # Postgres drops the dead worker's session (and its lock) once it sees the socket close.
    wait_for(lambda: [i.pk for i in orphaned_incidents()] == [incident.pk], timeout=30)
    second = Worker(env, tmp_path / "second.log").start()
    try:
        wait_until_finished(incident, timeout=120)
    finally:
        second.stop()
    incident.refresh_from_db()
    assert incident.status == "repaired", incident.error
    assert incident.counts == reference.counts
    assert verification_outcome(incident.verification) == verification_outcome(reference.verification)
    assert graph_dump("gone") == graph_dump("ref")
