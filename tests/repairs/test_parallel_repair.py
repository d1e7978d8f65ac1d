"""A repair walked in parts (repairs.job) must come out as the one-piece walk does, fall back to the
one-piece walk when its parts turn out to depend on each other, and survive a worker killed mid-part."""
import pytest
from django.db import connection

from compensation.models import AuditEvent
from kintsugi_site.celery import app
from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.selectors import export_state
from provenance.recording.services import desk_run
from repairs import parallel, parts
from repairs.models import Incident, RepairPart
from repairs.parts import whole_plan
from tests.helpers import Worker, open_incident, purge_broker, repair, wait_for, wait_until_finished, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

TICKETS, SEED = 300, 5


def _outcomes(incident: Incident) -> list:
    """Outcomes without the numbering of new actions, which differs between the two walks."""
    return sorted((o.agent, o.ticket, o.status, str(o.before), str(o.after)) for o in incident.outcomes.all())


def _effects(incident: Incident) -> list:
    return sorted(incident.effects.values_list("role", "kind", "ticket", "amount_cents"))


@pytest.fixture
def one_piece(settings):
    """The same desk repaired in one piece, for comparison."""
    settings.KINTSUGI_REPAIR_PARTS = 1
    desk_run(workspace="whole", tickets=TICKETS, seed=SEED)
    incident = repair("whole", POISONED_PAGE)
    assert incident.status == "repaired" and "parts" not in incident.plan
    settings.KINTSUGI_REPAIR_PARTS, settings.KINTSUGI_REPAIR_PARALLEL_MIN = 3, 1
    return incident


def test_a_repair_in_parts_equals_the_one_piece_repair(one_piece):
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    incident = repair("parts", POISONED_PAGE)
    assert incident.status == "repaired", incident.error
    assert [p["index"] for p in incident.plan["parts"]] == [0, 1, 2]
    assert incident.counts == one_piece.counts and incident.blast_radius == one_piece.blast_radius
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert _outcomes(incident) == _outcomes(one_piece)
    assert _effects(incident) == _effects(one_piece)
    assert export_state(workspace="parts") == export_state(workspace="whole")


def test_a_parts_long_lists_are_checkpointed_in_chunks(one_piece, monkeypatch):
    """A part's outcomes, effects, steps and upstream edges go to rows of their own, a few at a time, so
    a large part's plan never meets the jsonb limit; read back, they join to the one-piece result."""
    monkeypatch.setattr(parts, "OUT_OF_LINE", {name: 3 for name in parts.OUT_OF_LINE})
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    incident = repair("parts", POISONED_PAGE)
    assert incident.status == "repaired", incident.error
    assert "parts" in incident.plan
    for part in incident.parts.all():
        assert not set(parts.OUT_OF_LINE) & set(part.plan)
        plan = whole_plan(part)
        for name in parts.OUT_OF_LINE:
            assert part.chunks.filter(list=name).count() == -(-len(plan[name]) // 3)
        assert len(plan["outcomes"]) > 3
    assert _outcomes(incident) == _outcomes(one_piece)
    assert export_state(workspace="parts") == export_state(workspace="whole")


def test_a_part_checkpointed_with_its_lists_inline_still_joins():
    plan = {"steps": [["fact_retire", [1]]], "outcomes": [{"action_id": 1}], "effects": [], "upstream": {"1": []},
            "blast_radius": 1}
    assert whole_plan(RepairPart(plan=plan)) == plan


def _interleaved(graph, radius, masked, parts):
    """A wrong split: every other action, so handoffs and customer memory cross between parts."""
    ids = list(dict.fromkeys(list(masked) + list(radius)))
    return [ids[i::parts] for i in range(parts)]


def test_parts_that_depend_on_each_other_are_walked_in_one_piece(one_piece, monkeypatch):
    monkeypatch.setattr(parallel, "partition", _interleaved)
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    incident = repair("parts", POISONED_PAGE)
    assert incident.status == "repaired", incident.error
    assert "parts" not in incident.plan  # the check refused the join
    plans = [whole_plan(p) for p in incident.parts.order_by("index")]
    assert parallel.conflict(plans, [tuple(p.id_base) for p in incident.parts.order_by("index")])
    assert incident.counts == one_piece.counts
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert export_state(workspace="parts") == export_state(workspace="whole")


def test_without_the_check_a_wrong_split_shows_in_verification(one_piece, monkeypatch):
    """Red case for the join check: the same wrong split, joined anyway, repairs wrongly."""
    monkeypatch.setattr(parallel, "partition", _interleaved)
    monkeypatch.setattr(parallel, "conflict", lambda plans, bases: None)
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    incident = repair("parts", POISONED_PAGE)
    assert "parts" in incident.plan
    assert incident.status != "repaired" or sum(incident.verification[k] for k in ("facts", "decisions", "effects")) > 0


def _start_workers(n: int, tmp_path, **env) -> list[Worker]:
    purge_broker()
    workers = [Worker(worker_env(connection.settings_dict["NAME"], **env), tmp_path / f"w{i}.log").start()
               for i in range(n)]
    try:
        wait_for(lambda: len(app.control.ping(timeout=0.5) or []) >= n, timeout=60)
        _warm_up(n)
    except BaseException:
        for worker in workers:  # left running, they would take the next tests' tasks
            worker.stop()
        raise
    return workers


def _warm_up(n: int) -> None:
    """Give every worker a task first, so none is still loading Django when the repair starts: a
    cold helper can miss the baseline the test expects it to take."""
    import redis
    from django.conf import settings

    from repairs.tasks import record_baseline_task

    for _ in range(3 * n):
        record_baseline_task.delay(0)  # no such incident: the task only loads what it needs and returns
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    # The queue under this run's key prefix (pytest-xdist workers share the Redis database).
    queue = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "") + "celery"
    wait_for(lambda: broker.llen(queue) == 0, timeout=60)


@pytest.mark.worker
def test_two_workers_share_the_repair(one_piece, tmp_path):
    """The idle worker records the verification baseline and walks parts while the other repairs."""
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    workers = _start_workers(2, tmp_path, KINTSUGI_REPAIR_PARTS="3", KINTSUGI_REPAIR_PARALLEL_MIN="1",
                              KINTSUGI_VERIFY_SCOPE="full")  # the baseline an idle worker records ahead
    try:
        incident = open_incident("parts", POISONED_PAGE)
        wait_until_finished(incident, timeout=180)
    finally:
        for w in workers:
            w.stop()
    incident.refresh_from_db()
    assert incident.status == "repaired", incident.error
    assert incident.baseline_for["excluded"] == [POISONED_PAGE]
    # Who did what: the parts' walkers, the baseline's recorder and the processes that drafted items.
    # The idle worker usually takes the baseline; if it started late it still takes parts or drafting.
    drafters = {e.data["worker"] for e in AuditEvent.objects.filter(incident_id=incident.pk, action="item.drafted")}
    assert len({p.walked_by for p in incident.parts.all()} | {incident.baseline_for["recorded_by"]} | drafters) == 2
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
    assert incident.counts == one_piece.counts
    assert export_state(workspace="parts") == export_state(workspace="whole")


@pytest.mark.worker
def test_a_worker_killed_mid_part_resumes_without_walking_finished_parts_again(one_piece, tmp_path):
    desk_run(workspace="parts", tickets=TICKETS, seed=SEED)
    fault_file = tmp_path / "fault"
    fault_file.write_text("part:1")
    workers = _start_workers(1, tmp_path, KINTSUGI_REPAIR_PARTS="3", KINTSUGI_REPAIR_PARALLEL_MIN="1",
                             KINTSUGI_FAULT_FILE=str(fault_file))
    try:
        incident = open_incident("parts", POISONED_PAGE)
        wait_for(lambda: not fault_file.exists(), timeout=120)
        first_walk = RepairPart.objects.get(incident=incident, index=0)
        wait_until_finished(incident, timeout=180)
    finally:
        for w in workers:
            w.stop()
    incident.refresh_from_db()
    assert incident.status == "repaired", incident.error
    assert RepairPart.objects.get(incident=incident, index=0).walked_by == first_walk.walked_by
    assert _outcomes(incident) == _outcomes(one_piece) and _effects(incident) == _effects(one_piece)
    assert [incident.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]


def test_a_baseline_recorded_for_other_sources_is_recorded_again(settings, one_piece):
    """A repair being verified against a baseline that left out other sources: the baseline is recorded
    again and the diff made against the stale one is replaced."""
    from repairs.verify import verify_incident

    settings.KINTSUGI_VERIFY_SCOPE = "full"  # the whole-desk replay's baseline

    Incident.objects.filter(pk=one_piece.pk).update(
        status="repairing", phase="verifying", verification={"facts": 99, "decisions": 99, "effects": 99, "rows": []},
        baseline_for={"excluded": ["some/other-page"], "actions": 1})
    assert verify_incident(one_piece, excluded=one_piece.excluded_sources(), wait=False)
    one_piece.refresh_from_db()
    assert one_piece.baseline_for["excluded"] == [POISONED_PAGE] and one_piece.baseline_for["actions"] > 1
    assert [one_piece.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]


def test_the_worker_recording_the_baseline_diffs_if_the_repair_was_applied_meanwhile(settings, one_piece, monkeypatch):
    """The helper starts the baseline while the repair walks; if the repairing worker has applied by the
    time the baseline is there, the helper makes the diff too instead of leaving it to that worker."""
    settings.KINTSUGI_VERIFY_SCOPE = "full"  # the whole-desk replay's baseline, recorded ahead
    from repairs import verify

    Incident.objects.filter(pk=one_piece.pk).update(status="repairing", phase="applying", verification=None,
                                                    baseline_for=None)
    record = verify.record_baseline

    def record_while_the_repair_applies(**kw):
        actions = record(**kw)
        Incident.objects.filter(pk=one_piece.pk).update(phase="verifying")
        return actions

    monkeypatch.setattr(verify, "record_baseline", record_while_the_repair_applies)
    assert verify.verify_incident(one_piece, excluded=one_piece.excluded_sources(), wait=False)
    one_piece.refresh_from_db()
    assert [one_piece.verification[k] for k in ("facts", "decisions", "effects")] == [0, 0, 0]
