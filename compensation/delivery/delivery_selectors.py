"""What the pages and reports read about delivery: an item's delivery with its attempts, the failed
deliveries a person may see (the dashboard's count and the case queue's filter), and the report's
delivery line per item. Only what compensation.delivery.deliveries stored is shown: a status code, a fixed or
provider-given short reason (escaped where shown), never a secret or a receiver's raw answer."""
from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse

from compensation.delivery.connectors import config, connector
from compensation.delivery_models import Delivery, DeliveryAttempt, DeliveryState
from compensation.models import CompensationItem
from provenance.access import tenancy

S = DeliveryState
ATTEMPTS_SHOWN = 50  # an item's page lists its newest tries; the count says how many there were
FAILED = "failed"  # the case queue's `delivery` filter value: the deliveries a person must decide


def _label(name: str) -> str:
    try:
        return connector(name).label
    except ValueError:
        return name


def failed(*, user):
    """The deliveries `user` may see that no retry will change (failed, canceled, dead, uncertain)."""
    return tenancy.scoped(Delivery.objects.filter(state__in=S.needs_person()), user=user,
                          path="item__incident__workspace")


def failed_incident_ids(*, user) -> list[int]:
    return list(failed(user=user).order_by().values_list("item__incident_id", flat=True).distinct())


def failed_url() -> str:
    return reverse("admin:compensation_compensationitem_cases") + "?" + urlencode({"delivery": FAILED, "state": "all"})


def failed_deliveries(*, user) -> dict:
    """The dashboard's count of failed deliveries, with the case queue's filter it links to (one query)."""
    return {"count": failed(user=user).count(), "url": failed_url()}


def item_delivery(item: CompensationItem) -> dict | None:
    """An item's delivery for its page: state (with its words), connector, reference, why it failed, its
    newest attempts, and whether a person may send it again. None before approval."""
    delivery = Delivery.objects.filter(item=item).first()
    if delivery is None:
        if item.status not in (CompensationItem.Status.APPROVED, CompensationItem.Status.EXECUTED):
            return None
        name, _ = config.choice(workspace_id=item.incident.workspace_id, kind=item.kind)
        return {"state": S.QUEUED.value, "state_label": S.QUEUED.label, "connector": name,
                "connector_label": _label(name), "reference": "", "attempts": 0, "failure_reason": "",
                "accepted_at": None, "attempt_log": [], "needs_person": False}
    log = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("-at", "-pk")[:ATTEMPTS_SHOWN])
    return {"state": delivery.state, "state_label": S(delivery.state).label, "connector": delivery.connector,
            "connector_label": _label(delivery.connector), "reference": delivery.reference,
            "attempts": delivery.attempts, "failure_reason": delivery.failure_reason,
            "accepted_at": delivery.accepted_at, "next_attempt_at": delivery.next_attempt_at,
            "attempt_log": [{"at": a.at, "outcome": a.outcome, "outcome_label": S(a.outcome).label,
                             "status_code": a.status_code, "duration_ms": a.duration_ms, "detail": a.detail}
                            for a in log],
            "needs_person": delivery.state in S.needs_person()}


def report_line(item: CompensationItem, chosen: dict[str, str]) -> dict | None:
    """The report's delivery line of an item read with select_related("delivery"); `chosen` caches the
    workspace's connector per kind for items not yet tried (no query per item)."""
    try:
        delivery = item.delivery
    except Delivery.DoesNotExist:
        delivery = None
    if delivery is None:
        if item.status not in (CompensationItem.Status.APPROVED, CompensationItem.Status.EXECUTED):
            return None
        if item.kind not in chosen:
            chosen[item.kind] = config.choice(workspace_id=item.incident.workspace_id, kind=item.kind)[0]
        name, state, reference, attempts, reason = chosen[item.kind], S.QUEUED.value, "", 0, ""
    else:
        name, state, reference = delivery.connector, delivery.state, delivery.reference
        attempts, reason = delivery.attempts, delivery.failure_reason
    return {"state": state, "state_label": S(state).label, "connector": name, "connector_label": _label(name),
            "reference": reference, "attempts": attempts, "failure_reason": reason}
