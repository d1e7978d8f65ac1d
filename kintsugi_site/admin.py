"""The incident admin as people use it: repairs' incident pages (repairs.admin.IncidentPages) with what
they show of compensation (what waits for review, with its money, on the list, the page and the close
confirmation; the review queue's links; item counts) and the report downloads. Both apps are below this
one, so here each page reads the two directly."""
from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import Http404, HttpResponse
from django.urls import path, reverse

from compensation.review import review_numbers
from compensation.review import selectors as items
from core.throttle import wait_seconds
from kintsugi_site import reports
from repairs.admin import IncidentPages
from repairs.models import Incident
from repairs.selectors import status_label


class ReviewedChangeList(ChangeList):
    """The incident list's page, with what waits for review read for the whole page in two grouped
    queries (compensation.review.review_numbers) instead of per row."""

    def get_results(self, request):
        super().get_results(request)
        found = review_numbers.review_by_incident(incident_ids=[i.pk for i in self.result_list])
        for incident in self.result_list:
            incident._review = found[incident.pk]


def report_download(request, incident: Incident, fmt: str) -> HttpResponse:
    """The report file; 429 once the user spent KINTSUGI_REPORT_DOWNLOAD_RATE (a PDF is seconds of CPU)."""
    wait = wait_seconds(scope="report_download", user=request.user, rate=settings.KINTSUGI_REPORT_DOWNLOAD_RATE)
    if wait is not None:
        response = HttpResponse(f"Too many report downloads; try again in {wait} seconds.\n", status=429,
                                content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(wait)
        return response
    body, content_type, filename = reports.render_report(incident, fmt)
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@admin.register(Incident)
class IncidentAdmin(IncidentPages):
    list_display = ("number", "source_id", "workspace", "status_display", "pending_display", "money_display",
                    "progress_display", "blast_radius", "flagged_by", "created_at")

    def get_changelist(self, request, **kwargs):
        return ReviewedChangeList

    @staticmethod
    def _review(obj: Incident):
        found = getattr(obj, "_review", None)
        return found if found is not None else review_numbers.review(incident=obj)

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: Incident) -> str:
        return review_numbers.status_text(obj, self._review(obj))

    @admin.display(description="pending items")
    def pending_display(self, obj: Incident) -> str:
        found = self._review(obj)
        return f"{found.items_pending} in {found.cases_pending} case{'s' if found.cases_pending != 1 else ''}" if found.items_pending else "0"

    @admin.display(description="money pending")
    def money_display(self, obj: Incident) -> str:
        found = self._review(obj)
        return found.money if found.items_pending else "—"

    def get_urls(self):
        report = path("<int:incident_id>/report.<str:fmt>", self.admin_site.admin_view(self.report_view),
                      name="repairs_incident_report")
        return [report] + super().get_urls()

    def report_view(self, request, incident_id, fmt):
        if fmt not in reports.FORMATS:
            raise Http404(f"no {fmt} report")
        return report_download(request, self._incident(request, incident_id), fmt)

    def compensation_context(self, request, incident: Incident) -> dict:
        counts = items.item_counts(incident=incident)
        review = review_numbers.review(incident=incident, counts=counts)
        return {
            # While items wait for a person the status says so: never "Repaired" alone.
            "status_label": review_numbers.status_text(incident, review) if incident.status == Incident.Status.REPAIRED
            else status_label(incident),
            "review": review,
            "item_counts": counts,
            "review_url": items.review_queue_url(incident=incident, pending=True),
            "review_all_url": items.review_queue_url(incident=incident),
            "cases_url": items.cases_url(incident=incident),
            "reports": [{"fmt": f, "label": {"csv": "CSV (zip)"}.get(f, f.upper()),
                         "url": reverse("admin:repairs_incident_report", args=[incident.pk, f])} for f in reports.FORMATS],
        }

    def close_context(self, request, incident: Incident) -> dict:
        return {"item_counts": items.item_counts(incident=incident)}
