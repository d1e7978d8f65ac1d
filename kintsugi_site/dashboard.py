"""The support lead's dashboard (the admin's index page): sources worth a look, open incidents with the
money paid wrongly, to recover and recovered, the cases decided and who reviews them, the review queue's
size and amount, failed deliveries and the workspaces. It combines repairs and compensation, so it lives
above both."""
from __future__ import annotations

import logging

from compensation.review import incident_figures
from compensation.review import review_numbers
from compensation.review import selectors as item_selectors
from compensation.delivery.delivery_selectors import failed_deliveries
from core.vocabulary import IncidentStatus
from provenance.access import capabilities, tenancy
from provenance.graph.graph import GraphUnavailable
from repairs.models import Incident
from repairs.selectors import status_label

logger = logging.getLogger(__name__)
SUSPICIOUS_WORKSPACES = 3  # the most recently created workspaces the dashboard ranks sources of
SUSPICIOUS_PER_WORKSPACE = 3  # sources shown per workspace (each costs one blast-radius query)


def dashboard(*, user, limit: int = 10) -> dict:
    """What a lead sees first, over the workspaces `user` may see: open incidents, the review queue's size
    and amount, recent flags and the workspaces. Each part is shown only to whom the capability table
    (provenance.access.capabilities) lets read it through the API and MCP too: incidents need `read_incidents`,
    the queue's money and the failed deliveries `read_items`; a part not shown is None and not queried.
    Bounded queries on indexed columns only; no count over a whole table."""
    incidents, items = capabilities.may(user, "read_incidents"), capabilities.may(user, "read_items")
    open_incidents = recent = None
    if incidents:
        light = (tenancy.scoped(Incident.objects.all(), user=user).select_related("workspace", "flagged_by")
                 .defer("plan", "verification", "counts"))
        open_incidents = list(light.exclude(status=IncidentStatus.CLOSED).order_by("-created_at")[:limit])
        recent = list(light.order_by("-created_at")[:limit])
        ids = {i.pk for i in open_incidents + recent}
        counts = item_selectors.item_counts_by_incident(incident_ids=ids)
        reviews = review_numbers.review_by_incident(incident_ids=ids, counts=counts)
        recovery = incident_figures.recovery_by_incident(incident_ids=ids)
        reviewers = incident_figures.reviewers_by_incident(incident_ids=ids)
        for incident in open_incidents + recent:
            incident.item_counts, incident.review = counts[incident.pk], reviews[incident.pk]
            incident.recovery, incident.reviewers = recovery[incident.pk], reviewers[incident.pk]
            # A repaired incident reads amber, not green, while people still have something to do on it
            # (a running, failed or blocked repair keeps its own colour).
            incident.waiting = incident.status == IncidentStatus.REPAIRED and (
                bool(reviews[incident.pk].items_pending) or incident.recovery.waiting)
            # A repaired incident whose items wait reads "Needs review · 10 · $400.00", as on every other page.
            incident.status_label = (review_numbers.status_text(incident, reviews[incident.pk])
                                     if incident.status == IncidentStatus.REPAIRED else status_label(incident))
    return {
        "suspicious": suspicious(user=user) if capabilities.may(user, "read_sources") else None,
        "open_incidents": open_incidents,
        "recent_flags": recent,
        # Names, runs and action counts: what the API's workspace list gives every member.
        "workspaces": list(tenancy.visible_workspaces(user=user).order_by("name")[:limit]),
        "review_queue": item_selectors.compensation_summary(incident=None, user=user) if items else None,
        "failed_deliveries": failed_deliveries(user=user) if items else None,
        "limit": limit,
    }


def suspicious(*, user) -> list[dict]:
    """Sources worth a look in the newest workspaces the person may see: the few best of each by the cheap
    signals (repairs.suspicious, without what-ifs), each with its reasons. A workspace whose graph does
    not answer is named with that instead of failing the page."""
    from repairs.suspicious import suspicious_sources

    rows = []
    for workspace in tenancy.visible_workspaces(user=user).order_by("-created_at")[:SUSPICIOUS_WORKSPACES]:
        try:
            found = suspicious_sources(workspace=workspace, what_ifs=0, reach_for=SUSPICIOUS_PER_WORKSPACE)
        except GraphUnavailable as exc:
            logger.warning("sources worth a look: %s unavailable: %s", workspace.name, exc)
            rows.append({"workspace": workspace, "unavailable": True})
            continue
        rows += [{"workspace": workspace, "source": s.source, "pk": s.pk, "reasons": s.reasons,
                  "score": s.score} for s in found if s.score > 0]
    return rows
