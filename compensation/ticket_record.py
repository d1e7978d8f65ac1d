"""Everything the desk did about one ticket, for its admin page: the incidents that touched it, each
action's decision before → after (in words, linked to why it is in the incident), and its review items
with their decisions and edits, linked to their pages and cases.

Read within the workspaces the person may see (the ticket page itself is already scoped); the newest
`INCIDENT_LIMIT` incidents only, so a long-lived ticket's page stays bounded.
"""
from __future__ import annotations

from django.db.models import Q
from django.urls import reverse

from compensation.review.edits import edit_diffs
from compensation.models import CompensationItem
from provenance.access import tenancy
from provenance.models import Ticket
from provenance.recording.selectors import whole_seq
from repairs import ticket_story
from repairs.models import ActionOutcome, Incident
from repairs.wording import STATUS_LABELS, human_decision, status_label

INCIDENT_LIMIT = 20


def ticket_record(*, ticket: Ticket, user) -> dict:
    incidents = list(
        tenancy.scoped(Incident.objects.filter(workspace_id=ticket.workspace_id), user=user)
        .filter(Q(outcomes__ticket=ticket.ticket_id) | Q(compensation_items__ticket_id=ticket.ticket_id))
        .defer("plan", "verification").distinct().order_by("-pk")[:INCIDENT_LIMIT])
    by_pk = {i.pk: i for i in incidents}
    outcomes = list(ActionOutcome.objects.filter(incident_id__in=list(by_pk), ticket=ticket.ticket_id)
                    .order_by("-incident_id", "seq"))
    items = list(CompensationItem.objects.filter(incident_id__in=list(by_pk), ticket_id=ticket.ticket_id)
                 .select_related("decided_by").order_by("-incident_id", "pk"))
    diffs = edit_diffs(items)
    rows = []
    for incident in incidents:
        steps = [o for o in outcomes if o.incident_id == incident.pk]
        explain = reverse("admin:repairs_incident_explain", args=[incident.pk])
        rows.append({
            "incident": incident, "status": status_label(incident),
            "url": reverse("admin:repairs_incident_change", args=[incident.pk]),
            "story": ticket_story.build(ticket.ticket_id, steps, customer=ticket.customer_name,
                                        currency=ticket.currency) if steps else None,
            "decisions": [{"action": o.action_id, "agent": o.agent, "seq": whole_seq(o.seq),
                           "status": STATUS_LABELS.get(o.status, o.status),
                           "before": human_decision(o.agent, o.before, currency=ticket.currency) or "—",
                           "after": (human_decision(o.agent, o.after, currency=ticket.currency)
                                     if o.status not in ticket_story.GONE_AFTER else "") or "—",
                           "changed": o.before != o.after, "explain_url": f"{explain}?action={o.action_id}"}
                          for o in steps],
            "items": [{"item": i, "url": reverse("admin:compensation_compensationitem_change", args=[i.pk]),
                       "edits": diffs.get(i.pk, [])} for i in items if i.incident_id == incident.pk],
            "case_url": reverse("admin:compensation_compensationitem_case", args=[incident.pk, ticket.ticket_id]),
        })
    return {"incidents": rows, "more": len(incidents) == INCIDENT_LIMIT}
