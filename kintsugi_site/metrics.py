"""Prometheus metrics at `/metrics`, read from Postgres (and the broker) when scraped.

Collected at scrape time by one custom collector, not counted in process memory: several web processes,
workers and the beat each see part of the traffic, and whichever process answers the scrape reads the
shared stores, so the figures are the same from every process. Access: a scraper on loopback with no
proxy in front (REMOTE_ADDR loopback and no header a proxy adds) needs nothing; any other client, a
request a same-host proxy forwarded included, sends `Authorization: Bearer <KINTSUGI_METRICS_TOKEN>`
(unset: loopback only). README "Runbook" says what
each metric means and what to do when it alerts."""
from __future__ import annotations

import hmac
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count, F, Max, Min, Sum
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from core.vocabulary import ItemStatus, RecordingStatus
from repairs import sweep_marks

LOOPBACK = {"127.0.0.1", "::1"}
RECENT = timedelta(hours=1)


def _queue_depth() -> float:
    t = float(getattr(settings, "KINTSUGI_READYZ_TIMEOUT_SECONDS", 2.0))
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=t, socket_connect_timeout=t)
    try:
        return float(client.llen("celery"))
    except redis.RedisError:
        return float("nan")  # the broker is away: no figure rather than a false zero
    finally:
        client.close()


def _incidents():
    from provenance.models import Workspace
    from repairs import phases as repair_phases
    from repairs.models import Incident

    fam = GaugeMetricFamily("kintsugi_incidents", "Incidents by status and workspace.", labels=["status", "workspace"])
    counts = {(w, s): n for w, s, n in Incident.objects.values("workspace__name", "status").order_by()
              .annotate(n=Count("pk")).values_list("workspace__name", "status", "n")}
    for name in Workspace.objects.order_by("name").values_list("name", flat=True):
        for status in Incident.Status.values:
            fam.add_metric([status, name], counts.get((name, status), 0))
    yield fam
    stuck = (Incident.objects.filter(status__in=_stuck_statuses()).aggregate(oldest=Min("created_at"))["oldest"])
    yield GaugeMetricFamily("kintsugi_incidents_blocked_oldest_age_seconds",
                            "Age of the oldest incident still blocked or needing attention (0: none).",
                            value=(timezone.now() - stuck).total_seconds() if stuck else 0)
    done = Incident.objects.filter(finished_at__gte=timezone.now() - RECENT, started_at__isnull=False)
    agg = done.aggregate(n=Count("pk"), total=Sum(F("finished_at") - F("started_at")))
    yield SummaryMetricFamily("kintsugi_repair_duration_seconds",
                              "Repairs finished in the last hour: from start to finish.",
                              count_value=agg["n"] or 0,
                              sum_value=agg["total"].total_seconds() if agg["total"] else 0.0)
    phases = SummaryMetricFamily("kintsugi_repair_phase_seconds",
                                 "Repairs finished in the last hour: time in each phase (verifying includes "
                                 "drafting the review items).", labels=["phase"])
    for phase, (n, seconds) in repair_phases.finished_since(timezone.now() - RECENT).items():
        phases.add_metric([phase], count_value=n, sum_value=seconds)
    yield phases


def _verification():
    """What verifications cost, summed over the incidents' recorded verifications (a repair's own, by
    scope, and the whole-desk replays asked for since): replay calls to remote agents, actions re-run."""
    from repairs.models import Incident

    calls = CounterMetricFamily("kintsugi_verification_replay_calls",
                                "Replay calls to remote agents made by verifications.", labels=["scope"])
    rerun = CounterMetricFamily("kintsugi_verification_actions_rerun", "Actions re-executed by verifications.",
                                labels=["scope"])
    totals = {"radius": [0, 0], "full": [0, 0]}
    # The figures only, never the differing rows (megabytes on a large desk).
    rows = Incident.objects.filter(verification__has_key="scope").order_by().values_list(
        "verification__scope", "verification__replay_calls", "verification__actions_rerun",
        "verification__full_totals__replay_calls", "verification__full_totals__actions_rerun")
    for scope, calls_made, actions, full_calls, full_actions in rows.iterator():
        for kind, n, m in ((scope, calls_made, actions), ("full", full_calls, full_actions)):
            if kind in totals:
                totals[kind][0] += n or 0
                totals[kind][1] += m or 0
    for scope, (n, actions) in totals.items():
        calls.add_metric([scope], n)
        rerun.add_metric([scope], actions)
    yield from (calls, rerun)


def _stuck_statuses() -> list[str]:
    from repairs.models import Incident

    return [Incident.Status.BLOCKED, Incident.Status.NEEDS_ATTENTION]


def _review():
    from compensation.models import CompensationItem
    from provenance.models import Workspace

    pending = {w: (n, cents) for w, n, cents in CompensationItem.objects.filter(status=ItemStatus.PENDING)
               .values("incident__workspace__name").order_by().annotate(n=Count("pk"), cents=Sum("amount_cents"))
               .values_list("incident__workspace__name", "n", "cents")}
    failed = dict(CompensationItem.objects.filter(status=ItemStatus.APPROVED, execution_attempts__gt=0)
                  .values("incident__workspace__name").order_by().annotate(n=Count("pk"))
                  .values_list("incident__workspace__name", "n"))
    count = GaugeMetricFamily("kintsugi_review_items_pending", "Compensation items waiting for a reviewer.",
                              labels=["workspace"])
    amount = GaugeMetricFamily("kintsugi_review_items_pending_amount_cents",
                               "Money (cents) the pending items would move.", labels=["workspace"])
    delivery = GaugeMetricFamily("kintsugi_delivery_failures",
                                 "Approved items whose execution was tried and has not succeeded yet.",
                                 labels=["workspace"])
    for name in Workspace.objects.order_by("name").values_list("name", flat=True):
        n, cents = pending.get(name, (0, 0))
        count.add_metric([name], n)
        amount.add_metric([name], cents or 0)
        delivery.add_metric([name], failed.get(name, 0))
    yield from (count, amount, delivery)
    from compensation.models import ReviewNotice

    owed = ReviewNotice.objects.filter(settled_at__isnull=True, incident__compensations__isnull=False).count()
    yield GaugeMetricFamily("kintsugi_review_notices_owed", "Incidents whose reviewers are still owed the notice "
                            "that their cases are ready (the sweep sends them).", value=owed)


def _recording():
    from provenance.models import Recording, Workspace

    ops = GaugeMetricFamily("kintsugi_recordings", "HTTP recordings by status.", labels=["status"])
    by_status = dict(Recording.objects.values("status").order_by().annotate(n=Count("pk")).values_list("status", "n"))
    for status in Recording.Status.values:
        ops.add_metric([status], by_status.get(status, 0))
    yield ops
    actions = GaugeMetricFamily("kintsugi_recorded_actions", "Actions recorded per workspace.", labels=["workspace"])
    for name, n in Workspace.objects.order_by("name").values_list("name", "action_count"):
        actions.add_metric([name], n)
    yield actions
    recent = Recording.objects.filter(status=RecordingStatus.COMMITTED, finished_at__gte=timezone.now() - RECENT)
    agg = recent.aggregate(n=Count("pk"), total=Sum(F("finished_at") - F("created_at")))
    yield SummaryMetricFamily("kintsugi_recording_duration_seconds",
                              "Recordings committed in the last hour: from begin to commit.",
                              count_value=agg["n"] or 0,
                              sum_value=agg["total"].total_seconds() if agg["total"] else 0.0)


def _containment():
    from provenance.recording import containment

    now = containment.totals()
    yield GaugeMetricFamily("kintsugi_contained_facts", "Fact versions held out of live reads by flags whose "
                            "repair has not landed (and no false alarm lifted).", value=now["contained_facts"])
    yield GaugeMetricFamily("kintsugi_held_effects", "Effects of recordings that read through a containment, "
                            "held for their repair to settle.", value=now["held_effects"])
    yield GaugeMetricFamily("kintsugi_containment_pending", "Flags whose containment is not in place yet (the "
                            "graph was away at the flag).", value=now["pending"])
    seconds = now["seconds"]
    yield SummaryMetricFamily("kintsugi_flag_to_containment_seconds", "Time from a flag to its containment.",
                              count_value=len(seconds), sum_value=sum(seconds))
    yield GaugeMetricFamily("kintsugi_flag_to_containment_seconds_max", "The slowest flag to containment.",
                            value=max(seconds, default=0))


def _audit():
    from core.audit import chains, checkpoints
    from compensation.models import AuditEvent

    signed = {cp.chain: cp.seq for cp in checkpoints.latest().values()}
    lag = GaugeMetricFamily("kintsugi_audit_checkpoint_lag_seconds",
                            "How long the oldest audit row not yet covered by a signed checkpoint has waited.",
                            labels=["chain"])
    unsigned = GaugeMetricFamily("kintsugi_audit_unsigned_rows", "Audit rows past the last signed checkpoint.",
                                 labels=["chain"])
    now = timezone.now()
    for ws, head in AuditEvent.objects.values("workspace_id").order_by().annotate(head=Max("seq")) \
            .values_list("workspace_id", "head"):
        chain = chains.chain_label(ws)
        seq = signed.get(chain, 0)
        oldest = (AuditEvent.objects.filter(workspace_id=ws, seq__gt=seq).order_by("seq")
                  .values_list("at", flat=True).first()) if head > seq else None
        lag.add_metric([chain], (now - oldest).total_seconds() if oldest else 0)
        unsigned.add_metric([chain], max(0, head - seq))
    yield from (lag, unsigned)


class KintsugiCollector:
    """Everything above, read when scraped."""

    def collect(self):
        yield from _incidents()
        yield from _verification()
        yield from _review()
        yield from _recording()
        yield from _containment()
        yield from _audit()
        yield CounterMetricFamily("kintsugi_sweep_runs", "Outage sweeps run (since the cache was emptied).",
                                  value=sweep_marks.sweep_runs())
        last = sweep_marks.sweep_last_run()
        yield GaugeMetricFamily("kintsugi_sweep_last_run_age_seconds",
                                "Seconds since the outage sweep last ran (NaN: never, as far as the cache knows).",
                                value=time.time() - last if last else float("nan"))
        queue = GaugeMetricFamily("kintsugi_celery_queue_depth", "Tasks waiting in the broker's queue.",
                                  labels=["queue"])
        queue.add_metric(["celery"], _queue_depth())
        yield queue


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(KintsugiCollector())
    return reg


# Headers a reverse proxy adds. Behind a proxy on the same host every client arrives from loopback, so
# a loopback peer whose request carries one of these is some client a proxy forwarded, not a local
# scraper: it needs the token like any other.
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_X_FORWARDED_HOST",
                 "HTTP_X_FORWARDED_PROTO", "HTTP_VIA")


def _loopback_without_a_proxy(request) -> bool:
    return (request.META.get("REMOTE_ADDR") in LOOPBACK
            and not any(header in request.META for header in PROXY_HEADERS))


def allowed(request) -> bool:
    if _loopback_without_a_proxy(request):
        return True
    token = getattr(settings, "KINTSUGI_METRICS_TOKEN", "")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    return bool(token) and header.startswith("Bearer ") and hmac.compare_digest(header[7:].strip(), token)


@never_cache
@require_GET
def metrics(request):
    if not allowed(request):
        response = HttpResponse("metrics need a loopback address or the metrics bearer token\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
