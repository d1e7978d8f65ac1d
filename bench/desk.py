"""Benchmark: the review desk's pages on a repaired incident, each beside a baseline measured in the same
run on the same data.

Data: a desk of 400 tickets (150 with --quick; provenance.services.desk_run, seed 1) with the poisoned
page flagged (repairs.services.flag_source, via="cli") and repaired in-process with drafting on: a real
incident, its drafted items, cases, ticket stories and audit chain.

Pairs (page: baseline):
- the incident's cases (every item of the incident grouped into cases): the per-item changelist of the
  incident's pending items, the page the cases replaced as the reviewer's landing;
- one case page (its ticket's story, its items' notes and edit diffs): the review page of that case's
  reversal;
- a ticket page with what the desk did about it (incidents, decisions, items): the ticket change list;
- "verify the chain" in the admin: `manage.py verify_audit` run in-process (the same function, no HTTP).

Measure: django.test.Client, force_login as a superuser; per page one warm-up request (its SQL queries
counted), then up to N timed requests (median, p95), as bench.admin does.
"""
from __future__ import annotations

import io
import time

from bench import common

WORKSPACE = "bench-desk"
SIZES = {"full": {"tickets": 400, "repeat": 20}, "quick": {"tickets": 150, "repeat": 8}}


def _command_ms(repeat: int) -> dict:
    from django.core.management import call_command

    times = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        call_command("verify_audit", stdout=io.StringIO())
        times.append((time.perf_counter() - t0) * 1e3)
    ms = times[1:]  # the first is the warm-up, as for the pages
    return {"page": "verify_audit command", "queries": None, "median_ms": common.median(ms),
            "p95_ms": common.pct(ms, 95), "n": len(ms)}


def run(quick: bool) -> dict:
    from django.conf import settings
    from django.test import Client
    from django.urls import reverse

    import repairs.job as job
    import repairs.services as services
    from bench.admin import _superuser, measure
    from bench.repair import QueryLog, drafting
    from compensation import cases as case_selectors
    from compensation.models import CompensationItem
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Ticket, Workspace
    from provenance.services import desk_run
    from repairs.models import Incident

    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    mode = "quick" if quick else "full"
    size = SIZES[mode]
    user = _superuser()
    common.log(f"desk: repaired desk of {size['tickets']:,} tickets (desk_run + flag_source + run_repair)")
    t0 = time.perf_counter()
    name = f"{WORKSPACE}-{size['tickets']}-{int(time.time())}"
    summary = desk_run(workspace=name, tickets=size["tickets"], seed=1, reason="bench")
    ws = Workspace.objects.get(name=name)
    incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=user, reason="bench",
                                    via=Incident.Via.CLI)
    with drafting(True):
        incident = job.run_repair(incident_id=incident.pk)
    setup_s = time.perf_counter() - t0
    items = CompensationItem.objects.filter(incident=incident)
    found = case_selectors.cases(user=user, incident=incident)
    first = next(c for c in found if any(i.item.kind == CompensationItem.Kind.REFUND_REVERSAL for i in c.items))
    reversal = next(i.item for i in first.items if i.item.kind == CompensationItem.Kind.REFUND_REVERSAL)
    ticket = Ticket.objects.get(workspace=ws, ticket_id=first.ticket)
    inc = incident.pk
    changelist = reverse("admin:compensation_compensationitem_changelist")
    pairs = [
        (("cases of the incident", reverse("admin:compensation_compensationitem_cases") + f"?incident={inc}"),
         ("per-item queue of the incident, pending", f"{changelist}?incident__id__exact={inc}&status__exact=pending")),
        ((f"case page ({first.ticket}, {len(first.items)} items)",
          reverse("admin:compensation_compensationitem_case", args=[inc, first.ticket]) + f"?incident={inc}"),
         (f"review page of its reversal #{reversal.pk}",
          reverse("admin:compensation_compensationitem_change", args=[reversal.pk]))),
        ((f"ticket page ({ticket.ticket_id}) with what the desk did",
          reverse("admin:provenance_ticket_change", args=[ticket.pk])),
         ("ticket change list", reverse("admin:provenance_ticket_changelist"))),
        (("verify the chain (admin page)", reverse("admin:compensation_auditevent_verify")), None),
    ]
    client = Client()
    client.force_login(user)
    qlog = QueryLog()
    saved = qlog.install()
    rows = []
    try:
        for (page, url), baseline in pairs:
            measured = measure(client, page, url, repeat=size["repeat"], qlog=qlog)
            base = (measure(client, baseline[0], baseline[1], repeat=size["repeat"], qlog=qlog) if baseline
                    else _command_ms(size["repeat"]))
            rows.append({"page": measured, "baseline": base})
    finally:
        QueryLog.uninstall(saved)
    common.table(
        f"Review desk pages: incident #{inc}, {summary['actions']:,} actions, {items.count():,} items in "
        f"{len(found):,} cases",
        ["page", "queries", "median ms", "p95 ms", "baseline", "baseline queries", "baseline median ms", "ratio"],
        [[r["page"]["page"], r["page"]["queries"], r["page"]["median_ms"], r["page"]["p95_ms"], r["baseline"]["page"],
          r["baseline"]["queries"] if r["baseline"]["queries"] is not None else "—", r["baseline"]["median_ms"],
          f"{r['page']['median_ms'] / max(r['baseline']['median_ms'], 1e-6):.2f}x"] for r in rows],
        [f"setup {setup_s:.0f}s (desk of {size['tickets']:,} tickets recorded, flagged, repaired with drafting)",
         "queries: SQL queries of the warm-up request (session and user included); the command's are not counted",
         f"up to {size['repeat']} timed requests per page after one warm-up (django.test.Client, superuser)",
         f"load average {common.load_avg()} (other work may share the box)"])
    return {"mode": mode, **size, "incident": inc, "actions": summary["actions"], "items": items.count(),
            "cases": len(found), "setup_s": setup_s, "pairs": rows}
