"""Benchmark: the what-if of flagging a source against the real repair's walk, on one generated desk.

1. record: desk_run(tickets=N, seed=7), as bench repair does; then a full replay without the flagged page
   (bench.repair.full_replay) puts the clean model answers into the FalkorDB cache, so the what-if and the
   repair both run with cached model calls (the model client's in-process memo is reset before each);
2. what-if: repairs.what_if.compute_what_if, timed whole and by part (the walk; the drafting preview);
3. the real repair: flag_source + repairs.job.run_repair in this process, its walk timed by wrapping
   compute_plan in repairs.job (the baseline of the table; drafting off above bench.repair.DRAFTING_MAX_TICKETS, as in
   bench repair), and its counts held against the what-if's.
"""
from __future__ import annotations

import time

from bench import common
from bench.repair import DRAFTING_MAX_TICKETS, SEED, _actor, drafting, full_replay

WORKSPACE = "bench-what-if"


def run(tickets: int, quick: bool) -> dict:
    from django.conf import settings

    import compensation.drafting.drafts as drafts
    import repairs.job as job
    import repairs.services as services
    import repairs.what_if as what_if
    from provenance import llm
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs.models import Incident

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    settings.KINTSUGI_REPAIR_PARTS, settings.KINTSUGI_REPAIR_HELPERS = 1, False
    sw = common.Stopwatch()
    common.log(f"what_if: recording a desk of {tickets:,} tickets")
    summary = desk_run(workspace=WORKSPACE, tickets=tickets, seed=SEED, reason="bench")
    ws = Workspace.objects.get(name=WORKSPACE)
    common.log("what_if: full replay (warms the clean model answers)")
    llm.reset_client()
    full_replay(ws, excluded={POISONED_PAGE})

    orig_walk, orig_draft, orig_plan = what_if.compute_plan, drafts.draft_planned, job.compute_plan

    def timed(name, fn):
        def inner(*a, **kw):
            with sw(name):
                return fn(*a, **kw)
        return inner

    what_if.compute_plan = timed("what-if: walk (compute_plan)", orig_walk)
    drafts.draft_planned = timed("what-if: drafting preview", orig_draft)
    try:
        common.log("what_if: compute_what_if")
        llm.reset_client()
        with sw("what-if: total"):
            wi = what_if.compute_what_if(workspace=ws, source=POISONED_PAGE)
    finally:
        what_if.compute_plan, drafts.draft_planned = orig_walk, orig_draft
    fingerprint_after = what_if.desk_fingerprint(ws)

    job.compute_plan = timed("repair: walk (compute_plan)", orig_plan)
    try:
        common.log("what_if: the real repair (flag_source + run_repair)")
        incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=_actor(), reason="bench",
                                        via=Incident.Via.CLI)
        llm.reset_client()
        with drafting(tickets <= DRAFTING_MAX_TICKETS, lambda seconds: None), sw("repair: run_repair total"):
            incident = job.run_repair(incident_id=incident.pk)
    finally:
        job.compute_plan = orig_plan
    incident.refresh_from_db()
    same = (wi.blast_radius, wi.counts, wi.effects_invalidated) == (
        incident.blast_radius, {k: (incident.counts or {}).get(k, 0) for k in wi.counts}, incident.effects_invalidated)
    ph = sw.phases
    base = ph["repair: walk (compute_plan)"]
    res = {"tickets": tickets, "actions": summary["actions"], "blast_radius": wi.blast_radius, "counts": wi.counts,
           "items": len(wi.items), "phases": dict(ph), "what_if_over_walk": ph["what-if: total"] / base,
           "walk_over_walk": ph["what-if: walk (compute_plan)"] / base, "same_outcome": same,
           "desk_unchanged_by_what_if": fingerprint_after == wi.fingerprint, "incident": incident.status,
           "load_avg": common.load_avg()}
    rows = [
        ["the real repair's walk (baseline, same run)", incident.blast_radius, base, 1.0],
        ["what-if: the same walk, never applied", wi.blast_radius, ph["what-if: walk (compute_plan)"],
         res["walk_over_walk"]],
        [f"what-if: drafting preview ({len(wi.items):,} items, nothing saved)", len(wi.items),
         ph["what-if: drafting preview"], ph["what-if: drafting preview"] / base],
        ["what-if: total (fingerprint + walk + drafting)", wi.blast_radius, ph["what-if: total"],
         res["what_if_over_walk"]],
        ["the real repair: run_repair total (walk, apply, verify" + (", drafts)" if tickets <= DRAFTING_MAX_TICKETS
                                                                     else "; drafts off)"),
         incident.blast_radius, ph["repair: run_repair total"], ph["repair: run_repair total"] / base],
    ]
    common.table(f"What-if vs the real repair's walk: {tickets:,} tickets, {summary['actions']:,} actions, "
                 f"flagged {POISONED_PAGE}", ["measure", "actions / items", "seconds", "x the real walk"], rows,
                 [f"same outcome as the real repair (radius, counts, effects invalidated): {'yes' if same else 'NO'}; "
                  f"desk unchanged by the what-if: {'yes' if res['desk_unchanged_by_what_if'] else 'NO'}",
                  f"counts {wi.counts}; model answers cached for both (full replay first); load average "
                  f"{res['load_avg']}"])
    return res
