"""The support lead's dashboard (the admin's index page): open incidents with what of them waits for
review, the review queue's size and amount, failed deliveries and the workspaces. It combines repairs and
compensation, so it lives above both."""
from __future__ import annotations

from compensation.review import review_numbers
from compensation.review import selectors as item_selectors
from compensation.delivery.delivery_selectors import failed_deliveries
from core.vocabulary import IncidentStatus
from provenance.access import capabilities, tenancy
from repairs.models import Incident
from repairs.selectors import status_label


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
        reviews = {pk: review_numbers.from_counts(c) for pk, c in counts.items()}  # no query: status lines only
        for incident in open_incidents + recent:
            incident.item_counts, incident.review = counts[incident.pk], reviews[incident.pk]
            # A repaired incident whose items wait reads "Needs review · 10 · $400.00", as on every other page.
            incident.status_label = (review_numbers.status_text(incident, reviews[incident.pk])
                                     if incident.status == IncidentStatus.REPAIRED else status_label(incident))
    return {
        "open_incidents": open_incidents,
        "recent_flags": recent,
        # Names, runs and action counts: what the API's workspace list gives every member.
        "workspaces": list(tenancy.visible_workspaces(user=user).order_by("name")[:limit]),
        "review_queue": item_selectors.compensation_summary(incident=None, user=user) if items else None,
        "failed_deliveries": failed_deliveries(user=user) if items else None,
        "limit": limit,
    }
