"""Benchmark: bulk approvals of two reviewers at once on one workspace beside one reviewer alone, and what
the workspace's audit-chain lock holds while they decide.

`python -m bench review-lock [--quick]`. Data: one desk of 1,500 tickets (300 with --quick;
provenance.recording.services.desk_run, seed 7, as bench/reviewers.py) with the poisoned page flagged by a
Support lead and repaired in-process with drafting on. Each reviewer asks for the next BATCH cases (50; 12
with --quick) of the incident ("Give me the next N": compensation.review.assignments.next_batch) and
approves them as the case list's confirmation does on "Yes": a POST to the admin's bulk view
(compensation.case_bulk_admin) with the cases, the reason and the digest of what the page showed, from a
thread with its own database connection (django.test.Client, signed in); the reviewers press "Yes" together.

- one reviewer alone, one batch (the baseline a second reviewer is measured against);
- two reviewers at once, a batch each, on the same incident (one workspace, one audit chain);
- the same two, item by item with the lock first (the control, in the same run): every item decided
  alone, in a transaction that takes the chain's lock before anything else (lock_first below), so the
  lock is held across each whole decision, the shape of a bulk decision before they were batched.

One admin page is loaded first (the process's first request resolves the URLs and imports the admin).
Measured per row: wall time from the first "Yes" to the last answer, items approved, items per second
and its ratio to one reviewer alone, the transactions that took the chain's lock, the total time spent
waiting for it and holding it, and each hold's p50 / p95 (from a transaction's first lock_chain to its
commit or rollback: a transaction-level advisory lock is held until then). Checked after each row: no
valid item of the batches left pending, each approval once in the audit trail and as many as the items
approved, and the workspace's chain verifying (core.audit.verification) after its heads are signed.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager

from bench import common

SEED = 7
SIZES = {"full": {"tickets": 1_500, "batch": 50}, "quick": {"tickets": 400, "batch": 12}}  # 313 and ~84 cases
CONTROL = "item by item, lock first (control)"


class LockClock:
    """Wait and hold times of the audit chain's lock, per thread: lock_chain is timed (the wait), and the
    hold runs from the first lock_chain of a transaction to its commit or rollback."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.mutex = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.waits: list[float] = []
        self.holds: list[float] = []

    @contextmanager
    def installed(self):
        from django.db import connections

        from core.audit import trail

        wrapper_class = type(connections["default"])
        original_lock, original_commit, original_rollback = trail.lock_chain, wrapper_class.commit, wrapper_class.rollback
        clock = self

        def lock_chain(workspace):
            t0 = time.perf_counter()
            original_lock(workspace)
            t1 = time.perf_counter()
            with clock.mutex:
                clock.waits.append(t1 - t0)
            if getattr(clock.local, "since", None) is None:
                clock.local.since = t1

        def ended(original):
            def end(self_):
                try:
                    return original(self_)
                finally:
                    since = getattr(clock.local, "since", None)
                    if since is not None:
                        clock.local.since = None
                        with clock.mutex:
                            clock.holds.append(time.perf_counter() - since)
            return end

        trail.lock_chain = lock_chain
        wrapper_class.commit, wrapper_class.rollback = ended(original_commit), ended(original_rollback)
        try:
            yield self
        finally:
            trail.lock_chain = original_lock
            wrapper_class.commit, wrapper_class.rollback = original_commit, original_rollback


@contextmanager
def lock_first():
    """The control: every item decided alone, in a transaction that takes the chain's lock before anything
    else, so the lock is held across the whole decision (reading the item and its incident, the role and
    four-eyes checks, validation, the writes, the audit append and the commit), item after item: the shape
    of a bulk decision before decisions were batched and their reads moved out of the lock."""
    from django.db import transaction

    from compensation.review import decisions
    from core.audit import trail

    original = decisions.decide

    def decide(*, asked, **kw):
        outcome = decisions.Outcome()
        for one in asked:
            with transaction.atomic():
                trail.lock_chain(one.item.incident.workspace_id)
                done = original(asked=[one], **kw)
            outcome.decided += done.decided
            outcome.refused += done.refused
        return outcome

    decisions.decide = decide
    try:
        yield
    finally:
        decisions.decide = original


def _bulk_approve(user, keys: list[tuple[int, str]], out: dict, ready: threading.Barrier) -> None:
    """The case list's confirmation, "Yes" to approving `keys`: a POST to the admin's bulk view with what the
    confirmation page carries (the cases, the reason, the digest of what it showed)."""
    from django.db import connections
    from django.test import Client
    from django.urls import reverse

    from compensation.delivery import messages
    from compensation.models import CompensationItem
    from compensation.review import case_queue

    try:
        client = Client()
        client.force_login(user)
        found = case_queue.by_keys(user=user, keys_=keys)
        pending = [c.item.pk for case in found for c in case.pending]
        shown = messages.shown_digest([c.item for case in found for c in case.pending])
        ready.wait(timeout=600)  # the reviewers press "Yes" together
        t0 = time.perf_counter()
        response = client.post(reverse("admin:compensation_compensationitem_cases_bulk"), {
            "decision": "approve", "confirm": "yes", "case": [f"{i}/{t}" for i, t in keys],
            "reason": "approved in bulk from the case list", "shown": shown, "filters": ""})
        t1 = time.perf_counter()
        if response.status_code != 302:
            raise RuntimeError(f"the bulk view answered {response.status_code}")
        decided = CompensationItem.objects.filter(pk__in=pending, decided_by=user).count()
        out.update(started=t0, ended=t1, seconds=t1 - t0, decided=decided, refused=len(pending) - decided, cases=len(found))
    except Exception as exc:  # noqa: BLE001 - reported in the row's checks
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        connections.close_all()


def _warm_up(user, incident) -> None:
    """The process's first admin request resolves every URL and imports the admin's modules (seconds): done
    once before the rows, so the first row does not carry it."""
    from django.db import connections
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(user)
    client.get(reverse("admin:compensation_compensationitem_cases") + f"?incident={incident.pk}")
    connections.close_all()


def _batch(incident, user, size: int) -> list[tuple[int, str]]:
    from compensation.review import assignments
    from core.vocabulary import Via

    batch = assignments.next_batch(incident=incident, actor=user, count=size, reason="bench", via=Via.ADMIN)
    return [(incident.pk, t) for t in batch.tickets]


def _row(name: str, runs: list[dict], clock: LockClock, wall: float, incident, keys: list) -> dict:
    from compensation.models import AuditEvent, CompensationItem
    from core.audit import checkpoints, verification
    from core.vocabulary import AuditAction

    decided = sum(r.get("decided", 0) for r in runs)
    problems = [r["error"] for r in runs if "error" in r]
    tickets = {t for _, t in keys}
    items = CompensationItem.objects.filter(incident=incident, ticket_id__in=tickets)
    pending_valid = items.filter(status=CompensationItem.Status.PENDING, valid=True).count()
    if pending_valid:
        problems.append(f"{pending_valid} valid item(s) of the batches still pending")
    approvals = Counter(AuditEvent.objects.filter(incident_id=incident.pk, action=AuditAction.ITEM_APPROVED,
                                                  subject_id__in=[str(pk) for pk in items.values_list("pk", flat=True)])
                        .values_list("subject_id", flat=True))
    twice = [s for s, n in approvals.items() if n > 1]
    if twice:
        problems.append(f"{len(twice)} item(s) approved twice in the audit trail")
    if sum(approvals.values()) != decided:
        problems.append(f"{sum(approvals.values())} approvals recorded for {decided} items decided")
    checkpoints.flush()
    broken = [str(s) for s in verification.verify_all(workspace_ids=[incident.workspace_id]) if not s.holds]
    problems += broken
    holds = sorted(clock.holds)
    return {"run": name, "reviewers": len(runs), "cases": sum(r.get("cases", 0) for r in runs), "items": decided,
            "refused": sum(r.get("refused", 0) for r in runs), "wall_s": wall,
            "per_reviewer_s": [r.get("seconds") for r in runs], "items_per_s": decided / wall if wall else 0.0,
            "lock_transactions": len(holds), "lock_wait_s": sum(clock.waits), "lock_held_s": sum(holds),
            "hold_p50_ms": common.median(holds) * 1e3 if holds else 0.0,
            "hold_p95_ms": common.pct(holds, 95) * 1e3 if holds else 0.0, "problems": problems}


def _run(name: str, incident, users: list, size: int, clock: LockClock) -> dict:
    keys = [_batch(incident, user, size) for user in users]
    runs = [{} for _ in users]
    ready = threading.Barrier(len(users), action=clock.reset)  # only the decisions' holds are counted
    threads = [threading.Thread(target=_bulk_approve, args=(user, k, out, ready))
               for user, k, out in zip(users, keys, runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    timed = [r for r in runs if "started" in r]
    wall = max(r["ended"] for r in timed) - min(r["started"] for r in timed) if timed else 0.0
    return _row(name, runs, clock, wall, incident, [k for ks in keys for k in ks])


def run(quick: bool) -> dict:
    from bench.reviewers import _people, _repaired_desk
    from compensation.review import decisions

    mode = "quick" if quick else "full"
    size = SIZES[mode]
    run_id = str(int(time.time()))
    people = _people(run_id)
    common.log(f"review-lock: a repaired desk of {size['tickets']:,} tickets (desk_run + flag_source + run_repair)")
    t0 = time.perf_counter()
    incident, actions = _repaired_desk(f"bench-review-lock-{size['tickets']}-{run_id}", size["tickets"], people)
    setup_s = time.perf_counter() - t0
    _warm_up(people["cy"], incident)
    clock = LockClock()
    rows = []
    with clock.installed():
        for control in (False, True):
            with (lock_first() if control else _nothing()):
                mode_name = CONTROL if control else "batched"
                for label, who in (("one reviewer alone", ["cy"]), ("two reviewers at once", ["ana", "ben"])):
                    common.log(f"review-lock: {label}, {mode_name}")
                    rows.append(_run(label, incident, [people[p] for p in who], size["batch"], clock))
                    rows[-1]["mode"] = mode_name
    alone = {r["mode"]: r for r in rows if r["reviewers"] == 1}
    control = {r["reviewers"]: r for r in rows if r["mode"] == CONTROL}
    common.table(
        f"Bulk approvals of {size['batch']} cases per reviewer: incident #{incident.pk}, {actions:,} actions "
        f"(one workspace, one audit chain)",
        ["run", "decisions", "cases", "items", "wall s", "per reviewer s", "items/s", "vs one alone",
         "vs control", "lock txns", "lock wait s", "lock held s", "hold p50 ms", "hold p95 ms", "checks"],
        [[r["run"], r["mode"], r["cases"], r["items"], r["wall_s"],
          " / ".join(f"{s:.1f}" for s in r["per_reviewer_s"] if s), r["items_per_s"],
          _ratio(r["items_per_s"], alone[r["mode"]]["items_per_s"]),
          _ratio(r["items_per_s"], control[r["reviewers"]]["items_per_s"]),
          r["lock_transactions"], r["lock_wait_s"], r["lock_held_s"], r["hold_p50_ms"], r["hold_p95_ms"],
          "ok" if not r["problems"] else "FAILED"] for r in rows],
        [f"setup {setup_s:.0f}s (one desk of {size['tickets']:,} tickets recorded, flagged, repaired with drafting)",
         "each reviewer asks for the next batch (next_batch), then presses Yes on its bulk approval (a POST to the "
         "admin's bulk view), in a thread with its own connection; no Celery worker (approved items wait for one)",
         "batched: the product (compensation.review.decisions: reads before the chain's lock, one transaction per "
         f"{decisions.CHUNK_CASES} cases); {CONTROL}: each item decided alone in a transaction that takes the chain's lock "
         "before anything else (the lock held across each whole decision)",
         "vs one alone / vs control: items per second against one reviewer alone of the same decisions, and "
         "against the control with as many reviewers",
         "lock held: from a transaction's first lock_chain to its commit or rollback; wait: time in lock_chain",
         f"load average {common.load_avg()} (other work may share the box)"])
    for r in rows:
        for p in r["problems"][:10]:
            common.log(f"review-lock: {r['run']}: {p}")
    return {"mode": mode, **size, "incident": incident.pk, "actions": actions, "setup_s": setup_s, "runs": rows,
            "ok": not any(r["problems"] for r in rows)}


@contextmanager
def _nothing():
    yield


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"
